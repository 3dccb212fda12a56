"""Kept-alive HTTP/1.1 connections to one node's API, for its calls whose request and answer are
whole bodies (sandboxd.node.remote: the JSON of an operation), parsed by httptools (uvicorn's
parser already). httpcore's pool took 1.7 ms for a JSON round trip to a uvicorn app on
loopback where this takes 0.3 ms (h11's pure-Python state machine and anyio's locks, per
request), and every create pays that round trip (bench/README.md, "Cluster").

One request at a time per connection; an idle one is reused, the newest first, for up to the
keep-alive time. A request sent into a kept connection that the node closed before answering
anything (its side timed out just then) is sent once more on a new connection: the node read
none of it. Streamed bodies go over sandboxd.node.content_stream, a connection each."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import cast

import httptools

from sandboxd.errors import NodeUnreachable


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
    """Connections to `address` (host, port), at most `limit` at once (more calls wait);
    `timeouts`: to connect, and for a whole answer."""

    def __init__(self, address: tuple[str, int], keepalive_s: float,
                 timeouts: tuple[float, float], limit: int = 64) -> None:  # fmt: skip
        self._address = address
        self._keepalive_s = keepalive_s
        self._connect_s, self._answer_s = timeouts
        self._slots = asyncio.Semaphore(limit)
        self._idle: collections.deque[_Connection] = collections.deque()  # the newest last

    async def request(self, request: bytes) -> tuple[int, bytes]:
        """Send `request` (its head and body, whole) and return the answer's status and body.

        Raises:
            NodeUnreachable: no connection, no whole answer in time, or what came is not HTTP.
        """
        async with self._slots:
            connection, kept = self._kept(), True
            while True:
                if connection is None:
                    connection, kept = await self._connect(), False
                try:
                    return await connection.exchange(request, self._answer_s)
                except _Closed as exc:
                    if kept and not exc.answered:  # closed by the node while idle: read nothing
                        connection.close()
                        connection = None
                        continue
                    raise NodeUnreachable(f"the node's connection ended: {exc}") from exc
                except TimeoutError as exc:
                    raise NodeUnreachable(
                        f"no answer from the node for {self._answer_s} s"
                    ) from exc
                finally:  # kept only if its answer came whole (not when the call was cancelled)
                    if connection is not None:
                        self._put_back(connection)

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _kept(self) -> _Connection | None:
        """The newest idle connection, once those expired or closed by the node are dropped
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
        if connection.kept and not connection.closed:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_s):
                _, connection = await loop.create_connection(_Connection, *self._address)
        except (OSError, TimeoutError) as exc:
            raise NodeUnreachable(f"cannot connect: {exc!r}") from exc
        return connection
