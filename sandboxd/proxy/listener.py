"""sandboxd's one listener: each connection's requests go to the sandbox proxy or, for
everything else, to the control API (an ASGI app served by uvicorn).

uvicorn runs the server (sockets, lifespan, signals, graceful shutdown) with `Listener` as
its HTTP protocol class. A Listener parses the requests of one connection with httptools.
Requests for a sandbox are relayed below ASGI (sandboxd/proxy/relay.py); each control API request
is run on the control API's ASGI app here (sandboxd/proxy/control_exchange.py). Responses leave
in the order of the requests: a request that arrives while an earlier one is answered waits,
and reading stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
from typing import TYPE_CHECKING, Any, ClassVar, cast

import httptools

from envd.connection_limits import RefusalLog, plain_response
from sandboxd.proxy.connection_policy import (
    EVICTABLE_AFTER_IDLE_S,
    TOO_MANY,
    TOO_SLOW,
    ConnectionPolicy,
)
from sandboxd.proxy.control_exchange import ControlApp, ControlExchange
from sandboxd.proxy.exchange import Request
from sandboxd.proxy.routing import RequestHead

if TYPE_CHECKING:
    from sandboxd.proxy.exchange import Exchange
    from sandboxd.proxy.relay import SandboxProxy

log = logging.getLogger("sandboxd.proxy.listener")

# struct linger {l_onoff = 1, l_linger = 0}: close(2) then resets the connection.
RESET_ON_CLOSE = struct.pack("ii", 1, 0)
# What the client's transport may hold before the relay stops reading from the sandbox.
WRITE_BUFFER_HIGH = 1 << 20
BAD_REQUEST = plain_response(b"400 Bad Request", b"Invalid HTTP request")


class Listener(asyncio.Protocol):
    """One client connection. Built by uvicorn, as its `http` protocol class (see `serving`),
    under the connection policy of sandboxd/proxy/connection_policy.py."""

    proxy: ClassVar[SandboxProxy]
    policy: ClassVar[ConnectionPolicy]
    refusals: ClassVar[RefusalLog]
    # Every open Listener of this class (uvicorn's `connections` is every server's).
    open: ClassVar[set[Listener]]

    # uvicorn's protocol-class signature (sandboxd/proxy/control_exchange.py: what of it is used).
    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:  # fmt: skip
        self.control = ControlApp(config, server_state, app_state)
        self.connections: set[Any] = server_state.connections
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._receiving: Exchange | None = None  # the request whose bytes are arriving
        self._answering: Exchange | None = None  # the request whose response is being sent
        self._waiting: collections.deque[Exchange] = collections.deque()
        self._holds: set[str] = set()  # why reading is paused
        self._writable = True  # the transport's buffer is below its high-water mark
        self._close_after = False  # shut down, or the client asked: close once answered
        self._keep_alive_s: float = config.timeout_keep_alive
        self._idle_timer: asyncio.TimerHandle | None = None
        # A head, or a control body, that must be complete by then (loop time), and when the
        # client last sent anything.
        self._deadline: asyncio.TimerHandle | None = None
        self._streamed_body = False  # the receiving control body's deadline restarts per piece
        self._last_data = 0.0

    @classmethod
    def serving(cls, proxy: SandboxProxy, policy: ConnectionPolicy) -> type[Listener]:
        """A subclass bound to `proxy` (uvicorn takes a protocol class, not an instance)."""
        attributes = {"proxy": proxy, "policy": policy, "refusals": RefusalLog(log), "open": set()}
        return type(cls.__name__, (cls,), attributes)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self._last_data = asyncio.get_running_loop().time()
        if len(self.open) >= self.policy.max_connections and not self._evict_one():
            self.refusals.refused(len(self.open))
            self.transport.write(TOO_MANY)
            self.transport.close()
            return
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self.control.connected(transport)
        self.connections.add(self)
        self.open.add(self)
        self._idle()

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request without sending
        anything for EVICTABLE_AFTER_IDLE_S (a slowloris head, an idle keep-alive)."""
        now = asyncio.get_running_loop().time()
        waiting = [c for c in self.open if c._answering is None and not c._waiting
                   and now - c._last_data >= EVICTABLE_AFTER_IDLE_S]  # fmt: skip
        if not waiting:
            return False
        victim = min(waiting, key=lambda c: c._last_data)  # same class
        victim.abort()
        victim.open.discard(victim)
        return True

    def data_received(self, data: bytes) -> None:
        self._last_data = asyncio.get_running_loop().time()
        try:
            self._parser.feed_data(data)
            if self._receiving is not None:
                self._receiving.flush()
        except httptools.HttpParserUpgrade:
            # Upgrades (websockets) are not relayed: the request was handled as plain HTTP
            # without its Upgrade header, and the bytes after it have no meaning here.
            self._close_after = True
            if self._answering is None and not self._waiting:
                self._close()  # answered already (the proxy's own answers are synchronous)
        except httptools.HttpParserError:
            if self._answering is None and self.transport is not None:
                self.transport.write(BAD_REQUEST)
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.open.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._clear_deadline()
        for exchange in (self._answering, *self._waiting):
            if exchange is not None:
                exchange.client_lost()
        self._answering = None
        self._waiting.clear()
        self._receiving = None

    def eof_received(self) -> bool:
        return False  # as uvicorn: a client's half-close ends the connection

    def pause_writing(self) -> None:
        self._writable = False
        if self._answering is not None:
            self._answering.client_writable(False)

    def resume_writing(self) -> None:
        self._writable = True
        if self._answering is not None:
            self._answering.client_writable(True)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close now if idle, or once the response is sent."""
        self._close_after = True
        if isinstance(self._answering, ControlExchange):
            self._answering.keep_alive = False  # a head not yet sent says so, as uvicorn's
        if self._answering is None:
            self._close()

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._set_deadline(self.policy.header_timeout_s)
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        method = parser.get_method()
        request = Request(RequestHead.parse(method, self._url, self._headers), self._headers,
                          parser.get_http_version(), parser.should_keep_alive(),
                          parser.should_upgrade())  # fmt: skip
        exchange = self.proxy.exchange(request, self) or ControlExchange(self, request)
        self._clear_deadline()
        self._streamed_body = False
        if isinstance(exchange, ControlExchange) and self._answering is None:
            # Its body is read whole, and small (a queued one is not read until its turn), or
            # streamed to a file: then it only has to keep coming.
            self._set_deadline(self.policy.body_timeout_s)
            self._streamed_body = request.head.path.startswith(self.policy.streamed_prefixes)
        self._receiving = exchange
        if self._answering is None:
            self._begin(exchange)
        else:
            self._waiting.append(exchange)
            self.hold_reading("queue", True)

    def on_body(self, body: bytes) -> None:
        if self._receiving is not None:
            self._receiving.body(body)
            if self._streamed_body and self._deadline is not None:
                self._set_deadline(self.policy.body_timeout_s)

    def on_message_complete(self) -> None:
        self._clear_deadline()
        if self._receiving is not None:
            self._receiving.end()
            self._receiving = None
        if self._answering is None and self._idle_timer is None and not self._waiting:
            self._idle()  # answered before the request's end (an early answer)

    # the Client of sandboxd/proxy/relay.py

    def write(self, data: bytes | memoryview) -> bool:
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(data)
        return self.backed_up()

    def backed_up(self) -> bool:
        transport = self.transport
        return transport is not None and transport.get_write_buffer_size() > 0

    def answered(self, keep_alive: bool) -> None:
        self._answering = None
        if self.transport is None or self.transport.is_closing():
            return  # the client left
        if not keep_alive or self._close_after:
            self._close()
            return
        if self._waiting:
            exchange = self._waiting.popleft()
            if not self._waiting:
                self.hold_reading("queue", False)
            self._begin(exchange)
            exchange.flush()  # what arrived while it waited
        elif self._receiving is None:
            self._idle()

    def abort(self) -> None:
        """End the connection with a reset (RST), not a close (FIN): a client in the middle of
        a response must see a transport failure. A clean end within a chunked body read as a
        protocol error to the Python SDK 2.45, which reports a killed sandbox as killed only
        after a transport failure."""
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        self.transport.abort()

    def hold_reading(self, reason: str, hold: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        was_held = bool(self._holds)
        if hold:
            self._holds.add(reason)
        else:
            self._holds.discard(reason)
        if was_held != bool(self._holds):
            if self._holds:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _begin(self, exchange: Exchange) -> None:
        self._answering = exchange
        exchange.start()
        if not self._writable:  # still full from the response before
            exchange.client_writable(False)

    def _set_deadline(self, seconds: float) -> None:
        self._clear_deadline()
        self._deadline = asyncio.get_running_loop().call_later(seconds, self._too_slow)

    def _clear_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        """A head or a control body did not arrive in time: 408 unless an answer has begun,
        and the connection goes (the control API sees its client leave)."""
        self._deadline = None
        if self.transport is not None and self._answering is None:
            self.transport.write(TOO_SLOW)
        self._close()

    def _idle(self) -> None:
        """Between requests: closed after uvicorn's keep-alive timeout without a new one."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(self._keep_alive_s, self._close)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()
