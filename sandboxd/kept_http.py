"""Kept-alive HTTP/1.1 connections to one server, for requests and answers that are whole bodies
(a gateway's calls to a node: sandboxd.node.remote; sandboxd's own to envd: sandboxd.guest.
client), parsed by httptools (uvicorn's parser already). httpcore's pool took 1.6 ms for a JSON
round trip to a uvicorn app on loopback where this takes 0.4 ms (h11's pure-Python state
machine and anyio's locks, per request), and every create pays such round trips (bench.node_calls).

One request at a time per connection; an idle one is reused, the newest first, for up to the
keep-alive time. A request sent into a kept connection that the server closed before answering
anything (its side timed out just then) is sent once more on a new connection: the server read
none of it. Streamed bodies go elsewhere (sandboxd.node.content_stream), with a head from
`head()`."""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from typing import TYPE_CHECKING, cast

import httptools

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable


class Unreachable(Exception):
    """No connection, no whole answer in time, or what came is not HTTP."""


class _Closed(Exception):  # a state, not an error to report
    """The connection ended; `answered` whether any of the answer had come."""

    def __init__(self, answered: bool, cause: BaseException | None) -> None:
        super().__init__(repr(cause) if cause else "closed")
        self.answered = answered


class _Connection(asyncio.Protocol):
    """One connection: `exchange()` sends a request and waits for its whole answer."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self._status = 0
        self._body: list[bytes] = []
        self._answered = False  # a byte of the current answer came
        self.kept = True  # the last answer let the connection be reused
        self.closed = False
        self.idle_since = 0.0

    # asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # a stream's (uvloop's or asyncio's)

    def data_received(self, data: bytes) -> None:
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc)

    # httptools' callbacks
    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.kept = self._parser.should_keep_alive()
        if self._answer is not None and not self._answer.done():
            self._answer.set_result((self._status, b"".join(self._body)))

    async def exchange(self, request: bytes, timeout_s: float) -> tuple[int, bytes]:
        """The answer's status and body.

        Raises:
            _Closed: the connection ended first.
            TimeoutError: nothing whole came for `timeout_s`.
        """
        assert self._transport is not None  # noqa: S101  # connected
        self._answer = asyncio.get_running_loop().create_future()
        self._body, self._answered, self.kept = [], False, False
        if self.closed:
            raise _Closed(False, None)
        self._transport.write(request)
        async with asyncio.timeout(timeout_s):
            return await self._answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _fail(self, cause: BaseException | None) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(_Closed(self._answered, cause))


class KeptConnections:
    """Connections made by `connect`, at most `limit` at once (more calls wait); `timeouts`: to
    connect, and for a whole answer (a request may give its own)."""

    def __init__(self, connect: Callable[[], Awaitable[socket.socket]], keepalive_s: float,
                 timeouts: tuple[float, float], limit: int = 64) -> None:  # fmt: skip
        self._connect_socket = connect
        self._keepalive_s = keepalive_s
        self._connect_s, self._answer_s = timeouts
        self._slots = asyncio.Semaphore(limit)
        self._idle: collections.deque[_Connection] = collections.deque()  # the newest last
        self._closed = False

    async def request(self, method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                      body: bytes = b"", timeout_s: float | None = None) -> tuple[int, bytes]:  # fmt: skip
        """Send a request with `headers` (its Content-Length added) and `body`, and return the
        answer's status and body; `timeout_s`: for the whole answer, when not the default.

        Raises:
            Unreachable: no connection, no whole answer in time, or what came is not HTTP.
        """
        request = head(method, target, [*headers, (b"content-length", b"%d" % len(body))]) + body
        wait_s = self._answer_s if timeout_s is None else timeout_s
        async with self._slots:
            connection, kept = self._kept(), True
            while True:
                if connection is None:
                    connection, kept = await self._connect(), False
                try:
                    return await connection.exchange(request, wait_s)
                except _Closed as exc:
                    if kept and not exc.answered:  # closed by the server while idle: read nothing
                        connection.close()
                        connection = None
                        continue
                    raise Unreachable(f"the connection ended: {exc}") from exc
                except TimeoutError as exc:
                    raise Unreachable(f"no answer for {wait_s:g} s") from exc
                finally:  # kept only if its answer came whole (not when the call was cancelled)
                    if connection is not None:
                        self._put_back(connection)

    def close(self) -> None:
        """Close the idle connections, and each busy one once its answer came."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    def _kept(self) -> _Connection | None:
        """The newest idle connection, once those expired or closed by the server are dropped
        (the oldest first: a burst's connections left idle are not kept past their time)."""
        now = time.monotonic()
        while self._idle and (self._idle[0].closed or
                              now - self._idle[0].idle_since >= self._keepalive_s):  # fmt: skip
            self._idle.popleft().close()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    def _put_back(self, connection: _Connection) -> None:
        if connection.kept and not connection.closed and not self._closed:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()

    async def _connect(self) -> _Connection:
        if self._closed:
            raise Unreachable("the connections were closed")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_s):
                sock = await self._connect_socket()
            _, connection = await loop.create_connection(_Connection, sock=sock)
        except (OSError, TimeoutError) as exc:
            raise Unreachable(f"cannot connect: {exc!r}") from exc
        return connection


def head(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """An HTTP/1.1 request's head: its request line, then `headers` (name, value) in order."""
    lines = b"".join(b"%b: %b\r\n" % line for line in headers)
    return b"%b %b HTTP/1.1\r\n%b\r\n" % (method, target, lines)


def tcp(host: str, port: int) -> Callable[[], Awaitable[socket.socket]]:
    """`connect` for a TCP server at `host`:`port`."""

    async def connect() -> socket.socket:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock

    return connect
