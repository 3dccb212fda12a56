"""HTTP/1.1 connections to ports inside sandboxes, kept alive and reused per (sandbox, port).

A connection is an asyncio Protocol over a socket made in the sandbox's network namespace, with
httptools parsing the responses: one parser call per read, body bytes handed on as they arrive
(a Connect server stream's chunks are not held back), and reading paused while the client side
has not taken 1 MiB yet. Each connection carries one exchange at a time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING, cast

import httptools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.runtime import Box

PAUSE_READING_AT = 1 << 20
RESUME_READING_AT = 256 << 10
IDLE_TIMEOUT_S = 60.0
MAX_IDLE_PER_PORT = 16


class UpstreamClosed(ConnectionError):
    """The connection ended (reset, cut, closed) before its response did."""


class Exchange:
    """One request's response as it arrives: its head, then its body in chunks."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.head: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = loop.create_future()
        self.keep_alive = False
        self.complete = False
        self.received_any = False
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._error: BaseException | None = None
        self._wakeup = asyncio.Event()

    def push(self, chunk: bytes) -> int:
        """Add body bytes; returns how many are waiting for the consumer."""
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        self._wakeup.set()
        return self._buffered

    def finish(self) -> None:
        self.complete = True
        self._wakeup.set()

    def fail(self, error: BaseException) -> None:
        if self.complete or self._error is not None:
            return
        self._error = error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: a failure with no one waiting is not an error
        self._wakeup.set()

    async def body(self, connection: UpstreamConnection) -> AsyncIterator[bytes]:
        """The body as it arrives; what queued up meanwhile comes joined (fewer writes).

        Raises:
            UpstreamClosed: the connection ended before the body did.
        """
        while True:
            if self._chunks:
                chunk = b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                connection.resume_reading()
                yield chunk
                continue
            if self._error is not None:
                raise self._error
            if self.complete:
                return
            self._wakeup.clear()
            await self._wakeup.wait()


class UpstreamConnection(asyncio.Protocol):
    """One connection to `port` inside sandbox `sandbox_id`."""

    def __init__(self, sandbox_id: str, port: int) -> None:
        self.key = (sandbox_id, port)
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._exchange: Exchange | None = None
        self._no_body = False
        self._framed = False
        self._reading_paused = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._idle_timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's transport (uvloop's is not an asyncio.Transport subclass).
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        exchange = self._exchange
        if exchange is None or exchange.complete:
            self.abort()  # nothing was asked: the connection is out of step, drop it
            return
        exchange.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            exchange.fail(UpstreamClosed(f"bad HTTP from the sandbox: {exc}"))
            self.abort()

    def eof_received(self) -> bool:
        exchange = self._exchange
        if exchange is not None and exchange.head.done() and not self._framed:
            exchange.finish()  # a body delimited by the connection's end
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._can_write.set()  # a writer waiting for room learns of the end
        if self._exchange is not None:
            self._exchange.fail(UpstreamClosed(str(exc) if exc else "connection closed"))

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        headers, self._headers = self._headers, []
        if 100 <= status < 200:
            return  # interim (100 Continue, 103): the real head follows
        exchange = self._exchange
        assert exchange is not None  # noqa: S101  # data_received checked it
        exchange.keep_alive = self._parser.should_keep_alive()
        self._framed = self._no_body or status in (204, 304) or _has_framing(headers)
        exchange.head.set_result((status, headers))
        if self._no_body:
            # A HEAD answer's Content-Length announces no body; the parser cannot be told.
            exchange.keep_alive = False
            exchange.finish()

    def on_body(self, body: bytes) -> None:
        assert self._exchange is not None  # noqa: S101
        if self._exchange.push(body) >= PAUSE_READING_AT and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None  # noqa: S101
            self._transport.pause_reading()

    def on_message_complete(self) -> None:
        exchange = self._exchange
        if exchange is not None and exchange.head.done() and not self._no_body:
            exchange.finish()

    # used by the proxy

    def start(self, head: bytes, no_body: bool) -> Exchange:
        """Send a request's head; its response will arrive in the returned Exchange."""
        assert self._transport is not None  # noqa: S101
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._exchange = Exchange(self._loop)
        self._no_body = no_body
        self._framed = False
        self._transport.write(head)
        return self._exchange

    async def write(self, data: bytes) -> None:
        """Send request body bytes, waiting while the sandbox does not read.

        Raises:
            UpstreamClosed: the connection is gone.
        """
        if self.closed or self._transport is None:
            raise UpstreamClosed("connection closed")
        self._transport.write(data)
        if not self._can_write.is_set():
            await self._can_write.wait()
            if self.closed:
                raise UpstreamClosed("connection closed")

    def resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self.closed:
            self._reading_paused = False
            self._transport.resume_reading()

    def reusable(self) -> bool:
        exchange = self._exchange
        return (
            not self.closed and exchange is not None and exchange.complete and (exchange.keep_alive)
        )

    def park(self, on_expiry: asyncio.TimerHandle | None) -> None:
        self._exchange = None
        self._idle_timer = on_expiry

    def abort(self) -> None:
        """Drop the connection at once (RST): the sandbox's server sees the client go."""
        self.closed = True
        if self._transport is not None:
            self._transport.abort()


def _has_framing(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers)


class UpstreamPool:
    """Open connections by sandbox and port: idle ones kept for reuse, every one reachable by
    `cut` so that a killed or paused sandbox's streams end at once."""

    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._idle: dict[tuple[str, int], list[UpstreamConnection]] = {}
        self._open: dict[str, set[UpstreamConnection]] = {}

    def take_idle(self, sandbox_id: str, port: int) -> UpstreamConnection | None:
        idle = self._idle.get((sandbox_id, port))
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
            self._forget(connection)  # the sandbox's server closed it while idle
        return None

    async def connect(self, box: Box, port: int) -> UpstreamConnection:
        """A new connection to 127.0.0.1:`port` in the sandbox's network namespace.

        Raises:
            OSError: refused (nothing listens), or the sandbox's namespace is gone.
        """
        sock = await box.netns.connect(port)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: UpstreamConnection(box.id, port), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        self._open.setdefault(box.id, set()).add(connection)
        return connection

    def release(self, connection: UpstreamConnection) -> None:
        """Keep the connection for the next request, or close it if it cannot carry one."""
        if not connection.reusable():
            connection.abort()
            self._forget(connection)
            return
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) >= MAX_IDLE_PER_PORT:
            connection.abort()
            self._forget(connection)
            return
        expiry = asyncio.get_running_loop().call_later(
            self.idle_timeout_s, self._expire, connection
        )
        connection.park(expiry)
        idle.append(connection)

    def _expire(self, connection: UpstreamConnection) -> None:
        with contextlib.suppress(ValueError):
            self._idle.get(connection.key, []).remove(connection)
        connection.abort()
        self._forget(connection)

    def _forget(self, connection: UpstreamConnection) -> None:
        sandbox_id, _ = connection.key
        open_ones = self._open.get(sandbox_id)
        if open_ones is not None:
            open_ones.discard(connection)
            if not open_ones:
                del self._open[sandbox_id]

    def cut(self, sandbox_id: str) -> int:
        """Abort every connection to the sandbox, busy or idle; returns how many there were."""
        connections = self._open.pop(sandbox_id, set())
        for key in [key for key in self._idle if key[0] == sandbox_id]:
            del self._idle[key]
        for connection in connections:
            connection.abort()
        return len(connections)

    def close(self) -> None:
        for sandbox_id in list(self._open):
            self.cut(sandbox_id)
