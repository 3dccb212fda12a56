"""HTTP/1.1 connections to ports inside sandboxes, kept alive and reused per (sandbox, port).

A connection is an asyncio BufferedProtocol over a socket made in the sandbox's network
namespace: the loop reads into the pool's read buffer (no bytes object made and copied per
read), and the response's bytes go from there to the client's transport as they arrive,
unchanged (head and framing included): httptools only follows where the response ends, with no
Python object per body chunk. When the client's transport has too much to send, reading from
the sandbox pauses (TCP flow control does the rest). Each connection carries one exchange at a
time.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol, cast

import httptools

if TYPE_CHECKING:
    from sandboxd.runtime.engine import Box

IDLE_TIMEOUT_S = 60.0
# What one read may take: a download's reads came to 0.66 MiB on average with it (uvloop's own
# buffer for a plain Protocol is 250 KB).
READ_BUFFER = 1 << 20
MIN_READ = 64 * 1024  # a read smaller than this would cost more in calls than it saves
# A read smaller than this that a backed-up client would queue is copied instead (the proxy's
# Relay): a kept slice pins the whole 1 MiB it is part of, whichever connection read after it.
COPY_BELOW = 256 * 1024
MAX_IDLE_PER_PORT = 16
FRAMING_HEADERS = (b"content-length", b"transfer-encoding")


class ResponseSink(Protocol):
    """Where a connection's response goes: the relay of the request it answers."""

    def response_bytes(self, data: memoryview) -> bool:
        """Response bytes (head or body) to forward, in order. True when `data` is still
        referenced afterwards (queued by a transport), so its memory must not be reused."""

    def response_complete(self, keep_alive: bool) -> None:
        """The response ended; `keep_alive` when its head did not ask to close."""

    def response_failed(self, reason: str, received: bool) -> None:
        """The connection ended (reset, cut, bad HTTP) before the response did; `received`
        when any byte of a response had come (the request reached the server)."""

    def upstream_writable(self, writable: bool) -> None:
        """The sandbox stopped (False) or resumed (True) taking request bytes."""


class ReadBuffer:
    """Memory the loop reads into, shared by a pool's connections: each read is handed on
    before the next one starts (the loop runs one callback at a time).

    A read the client's transport keeps (queued, not copied) pins the whole bytearray it is a
    slice of, so the next read goes after it in the same memory, and new memory is taken only
    when little is left. Reads under COPY_BELOW for a backed-up client are copied instead, so
    what a stalled client pins stays within a few times what it has queued. (A new 1 MiB per
    kept read let a slow client of a stream of small events pin gigabytes before its
    transport's 1 MiB high-water mark paused the relay.)"""

    def __init__(self) -> None:
        self._memory = memoryview(bytearray(READ_BUFFER))
        self._start = 0

    def free(self) -> memoryview:
        """Where the next read goes."""
        return self._memory[self._start :]

    def keep(self, nbytes: int) -> None:
        """The last read's `nbytes` stay referenced: later reads go after them."""
        self._start += nbytes
        if READ_BUFFER - self._start < MIN_READ:
            self._memory = memoryview(bytearray(READ_BUFFER))
            self._start = 0


class UpstreamConnection(asyncio.BufferedProtocol):
    """One connection to `port` inside sandbox `sandbox_id`, reading into `buffer`."""

    def __init__(self, sandbox_id: str, port: int, buffer: ReadBuffer) -> None:
        self.key = (sandbox_id, port)
        self._buffer = buffer
        self.closed = False
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._sink: ResponseSink | None = None
        self._head_only = False  # the request was HEAD: the head is the whole response
        self._head_seen = False
        self._framed = False  # Content-Length or chunked: not delimited by the connection's end
        self._final_head = False  # the head being parsed is not an interim (1xx) one
        self._complete = False
        self._keep_alive = False
        self._received = False
        self._reading_paused = False
        self._idle_timer: asyncio.TimerHandle | None = None

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's transport (uvloop's is not an asyncio.Transport subclass).
        self._transport = cast("asyncio.Transport", transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer.free()

    def buffer_updated(self, nbytes: int) -> None:
        data = self._buffer.free()[:nbytes]
        self._received = True
        sink = self._sink
        if sink is None:  # nothing was asked, or answered already: out of step, drop it
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"bad HTTP from the sandbox: {exc}")
            self.abort()
            return
        if sink.response_bytes(data):  # queued by the client's transport, not copied
            self._buffer.keep(nbytes)
        if self._complete:
            self._sink = None
            sink.response_complete(self._keep_alive)

    def eof_received(self) -> bool:
        sink = self._sink
        if sink is not None and self._head_seen and not self._framed and not self._complete:
            self._complete = True  # a body delimited by the connection's end
            self._sink = None
            sink.response_complete(False)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(str(exc) if exc else "connection closed")

    def pause_writing(self) -> None:
        if self._sink is not None:
            self._sink.upstream_writable(False)

    def resume_writing(self) -> None:
        if self._sink is not None:
            self._sink.upstream_writable(True)

    # httptools callbacks (headers are only looked at for the framing)

    def on_message_begin(self) -> None:
        self._framed = False
        self._final_head = False

    def on_header(self, name: bytes, _value: bytes) -> None:
        if name.lower() in FRAMING_HEADERS:
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            return  # interim (100 Continue, 103): forwarded too, the real head follows
        self._final_head = self._head_seen = True
        self._framed = self._framed or status in (204, 304)
        self._keep_alive = self._parser.should_keep_alive()
        if self._head_only:
            # A HEAD answer's Content-Length announces no body; the parser cannot be told, so
            # this connection is not used again. The client's is not either, unless the status
            # has no body by definition: a server that sends a body anyway (do_HEAD = do_GET)
            # would have it read as the start of the next response, and httptools does not say
            # where in the read the head ended.
            self._complete = True
            self._keep_alive = self._keep_alive and status in (204, 304)

    def on_message_complete(self) -> None:
        if self._final_head:
            self._complete = True

    # used by the proxy

    def start(self, sink: ResponseSink, head_only: bool) -> None:
        """Begin an exchange: the response to what is written next will go to `sink`."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._sink = sink
        self._head_only = head_only
        self._head_seen = self._complete = self._keep_alive = self._received = False

    def write(self, data: bytes) -> None:
        """Send request body bytes (the sink hears when the sandbox stops taking them)."""
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def reading(self, on: bool) -> None:
        """Pause or resume reading the response (the client's side is full, or has room)."""
        if self.closed or self._transport is None or self._reading_paused != on:
            return
        self._reading_paused = not on
        if on:
            self._transport.resume_reading()
        else:
            self._transport.pause_reading()

    def reusable(self) -> bool:
        return not self.closed and self._complete and self._keep_alive and not self._head_only

    def park(self, on_expiry: asyncio.TimerHandle | None) -> None:
        self.reading(True)  # paused for a client that was full: the next may not be
        self._sink = None
        self._idle_timer = on_expiry

    def abort(self) -> None:
        """Drop the connection at once (RST): the sandbox's server sees the client go, and a
        response in progress fails."""
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, reason: str) -> None:
        sink, self._sink = self._sink, None
        if sink is not None and not self._complete:
            sink.response_failed(reason, self._received)


class UpstreamPool:
    """Open connections by sandbox and port: idle ones kept for reuse, every one reachable by
    `cut` so that a killed or paused sandbox's streams end at once."""

    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._read_buffer = ReadBuffer()
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
        sock = await box.dialer.connect(port)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: UpstreamConnection(box.id, port, self._read_buffer), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        self._open.setdefault(box.id, set()).add(connection)
        return connection

    def release(self, connection: UpstreamConnection) -> None:
        """Keep the connection for the next request, or close it if it cannot carry one."""
        if not connection.reusable():
            self.drop(connection)
            return
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) >= MAX_IDLE_PER_PORT:
            self.drop(connection)
            return
        expiry = asyncio.get_running_loop().call_later(
            self.idle_timeout_s, self._expire, connection
        )
        connection.park(expiry)
        idle.append(connection)

    def drop(self, connection: UpstreamConnection) -> None:
        connection.abort()
        self._forget(connection)

    def _expire(self, connection: UpstreamConnection) -> None:
        with contextlib.suppress(ValueError):
            self._idle.get(connection.key, []).remove(connection)
        self.drop(connection)

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
