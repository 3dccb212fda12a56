"""The HTTP/1.1 connection policy uvicorn's httptools protocol lacks, so that no client can hold
the daemon's memory or descriptors: a cap on request-header size, deadlines for receiving
headers and bodies, and a cap on open connections. Without them one huge header grows the
daemon without bound (httptools buffers it all), and idle or trickling ("slowloris")
connections are held forever until the descriptors run out. Keep-alive idling between
requests is not affected. The numbers are in connection_limits."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from envd.connection_limits import STREAMING_BODIES, ConnectionLimits, RefusalLog, plain_response

if TYPE_CHECKING:
    import asyncio

    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

log = logging.getLogger("envd.connection")

# At the cap, a connection that has sent nothing for this long while waiting for a request or
# for the rest of a body read whole makes room for the new one. Fresh connections (the one a
# /health probe just opened) are never the victims.
EVICTABLE_AFTER_IDLE_S: Final = 1.0
# After a search found no victim, new connections are refused without searching again for this
# long: the search walks every open connection.
EVICTION_RETRY_S: Final = 0.1


_TOO_LARGE: Final = plain_response(
    b"431 Request Header Fields Too Large", b"431 Request Header Fields Too Large"
)
_TOO_SLOW: Final = plain_response(
    b"408 Request Timeout", b"408 Request Timeout: request body not received in time"
)
_TOO_MANY: Final = plain_response(
    b"503 Service Unavailable", b"503 Service Unavailable: too many open connections"
)


_refusals = RefusalLog(log)


class _VictimSearch:
    """When the last search for a connection to evict found none (see EVICTION_RETRY_S)."""

    no_victim_until = float("-inf")  # loop time


_victims = _VictimSearch()


class _OpenPeak:
    """The most connections open at once since the server last asked (connections_peak)."""

    highest = 0


_open_peak = _OpenPeak()


def connections_peak() -> int:
    """The most connections open at once since the last call. The server samples the open
    count once a tick; a burst that opens and closes between two ticks shows only here."""
    highest, _open_peak.highest = _open_peak.highest, 0
    return highest


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus the limits of the module docstring.

    - At `max_connections`, a new connection evicts one that has been idle for
      EVICTABLE_AFTER_IDLE_S while waiting for a request or for a body read whole (slowloris
      and trickling clients, idle keep-alive); when every connection is busy, the new one is
      answered 503 and closed at once.
    - A request's headers must arrive within `header_timeout_s` of the connection opening or
      of the request's first byte, and total at most `max_header_bytes` (URL included), or
      the connection is closed (with a 431 answer for oversized headers).
    - A body read whole must be complete within `body_timeout_s` of the end of its headers;
      a streamed body (STREAMING_BODIES) must not go `body_idle_timeout_s` without data.
      Otherwise the handler sees a client disconnect and the client a 408 (if no answer has
      begun), and the connection is closed. Time during which envd itself stopped reading
      (flow control: the handler is behind) does not count.
    """

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    # uvicorn's constructor signature; everything else is per-connection state.
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # forwarded unchanged
        self._refused = False
        self._awaiting_headers = True
        self._header_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_body = False
        self._streaming_body = False
        self._body_since = 0.0  # loop time of the headers' end, or of the last body data
        self._body_timer: asyncio.TimerHandle | None = None
        self._last_data = 0.0  # loop time of the last bytes received, or of the connection

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
        """A subclass with other limits (uvicorn takes a protocol class, not an instance)."""
        return type(cls.__name__, (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows it too
        open_connections = len(self.server_state.connections)
        if open_connections >= self.limits.max_connections and not self._evict_one():
            # Refused before uvicorn tracks it: the descriptor is released at once.
            self._refused = True
            _refusals.refused(open_connections)
            transport.write(_TOO_MANY)
            transport.close()
            return
        super().connection_made(transport)
        _open_peak.highest = max(_open_peak.highest, open_connections + 1)
        self._last_data = self.loop.time()
        self._arm_header_timer()

    def _evict_one(self) -> bool:
        """Close one connection that is idle while waiting for its client; False if none is."""
        now = self.loop.time()
        if now < _victims.no_victim_until:
            return False
        for connection in self.server_state.connections:
            if isinstance(connection, GuardedHttpToolsProtocol) and connection._evictable(now):
                connection._evict()
                return True
        _victims.no_victim_until = now + EVICTION_RETRY_S
        return False

    def _evictable(self, now: float) -> bool:
        if self.transport.is_closing() or now - self._last_data < EVICTABLE_AFTER_IDLE_S:
            return False
        cycle: RequestResponseCycle | None = self.cycle  # None until the first request
        waiting_for_request = self._awaiting_headers and (cycle is None or cycle.response_complete)
        waiting_for_body = self._in_body and not self._streaming_body
        return waiting_for_request or waiting_for_body

    def _evict(self) -> None:
        # Debug only: under a flood there is one per new connection.
        log.debug("closing %s to make room: idle with the connection cap reached", self.client)
        if self._in_body:
            self._end_incomplete_request()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return  # uvicorn never saw it
        self._cancel_header_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._last_data = self.loop.time()
        if self._awaiting_headers:
            # Counted before parsing: bytes after the end of the headers reset the count in
            # on_headers_complete, so only header bytes are ever held against the cap.
            self._header_bytes += len(data)
            if self._header_timer is None:  # the first byte of a request after keep-alive
                self._arm_header_timer()
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._awaiting_headers and self._header_bytes > self.limits.max_header_bytes:
            log.warning(
                "closing %s: request headers over %d bytes",
                self.client,
                self.limits.max_header_bytes,
            )
            self.transport.write(_TOO_LARGE)
            self.transport.close()
        elif self._in_body:
            # Timed lazily: a body that arrives with its headers never starts a timer.
            if self._streaming_body:
                self._body_since = self.loop.time()
            if self._body_timer is None:
                self._arm_body_timer(self._body_timeout_s())

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._header_bytes = 0
        self._cancel_header_timer()
        super().on_headers_complete()
        self._in_body = True
        request = (self.scope["method"], self.scope.get("path"))  # no path: an upgrade
        self._streaming_body = request in STREAMING_BODIES
        self._body_since = self.loop.time()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_body_timer()
        super().on_message_complete()
        self._awaiting_headers = True  # whatever arrives next starts a new request

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout_s, self._headers_too_slow
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        cycle: RequestResponseCycle | None = self.cycle  # None until the first request
        busy = cycle is not None and not cycle.response_complete
        if self._awaiting_headers and not busy and not self.transport.is_closing():
            log.info(
                "closing %s: no complete request headers in %ss",
                self.client,
                self.limits.header_timeout_s,
            )
            self.transport.close()

    def _body_timeout_s(self) -> float:
        if self._streaming_body:
            return self.limits.body_idle_timeout_s
        return self.limits.body_timeout_s

    def _arm_body_timer(self, delay: float) -> None:
        self._body_timer = self.loop.call_later(delay, self._check_body_progress)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _check_body_progress(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # envd is not reading (the handler is behind, or a pipelined request waits its
            # turn): the client gets a full period once reading resumes.
            self._body_since = now
            self._arm_body_timer(self._body_timeout_s())
            return
        remaining = self._body_since + self._body_timeout_s() - now
        if remaining > 0:  # a streamed body that moved since the timer was armed
            self._arm_body_timer(remaining)
            return
        self._cut_slow_body()

    def _cut_slow_body(self) -> None:
        log.info(
            "closing %s: request body of %s %s %s",
            self.client,
            self.scope["method"],
            self.scope["path"],
            f"idle for {self.limits.body_idle_timeout_s}s"
            if self._streaming_body
            else f"not complete in {self.limits.body_timeout_s}s",
        )
        self._end_incomplete_request()

    def _end_incomplete_request(self) -> None:
        cycle = self.cycle
        if not cycle.response_started and not self.pipeline:
            # The handler sees a disconnect (its answer would go nowhere); the client sees why.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.write(_TOO_SLOW)
        self.transport.close()
