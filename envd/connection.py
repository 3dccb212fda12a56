"""The HTTP/1.1 connection policy uvicorn's httptools protocol lacks: a cap on request-header
size and a deadline for receiving them. Without the cap one request with a huge header grows
the daemon without bound (httptools buffers it all); without the deadline an idle or
trickling ("slowloris") connection is held forever. Keep-alive idling is not affected."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    import asyncio

    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

log = logging.getLogger("envd.connection")

# Go net/http's DefaultMaxHeaderBytes, which the reference envd runs with.
MAX_HEADER_BYTES: Final = 1 << 20
HEADER_TIMEOUT_S: Final = 30.0

_TOO_LARGE_BODY: Final = b"431 Request Header Fields Too Large"
_TOO_LARGE: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus the header limits (see the module docstring).

    A request's headers must arrive within `header_timeout_s` of the connection opening or of
    the request's first byte, and total at most `max_header_bytes` (URL included); otherwise
    the connection is closed, with a 431 answer for oversized headers.
    """

    max_header_bytes: ClassVar[int] = MAX_HEADER_BYTES
    header_timeout_s: ClassVar[float] = HEADER_TIMEOUT_S

    # uvicorn's constructor signature; everything else is per-connection state.
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # forwarded unchanged
        self._awaiting_headers = True
        self._header_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = None

    @classmethod
    def with_limits(
        cls, *, max_header_bytes: int, header_timeout_s: float
    ) -> type[GuardedHttpToolsProtocol]:
        """A subclass with other limits (uvicorn takes a protocol class, not an instance)."""
        attributes = {"max_header_bytes": max_header_bytes, "header_timeout_s": header_timeout_s}
        return type(cls.__name__, (cls,), attributes)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows it too
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers:
            # Counted before parsing: bytes after the end of the headers reset the count in
            # on_headers_complete, so only header bytes are ever held against the cap.
            self._header_bytes += len(data)
            if self._header_timer is None:  # the first byte of a request after keep-alive
                self._arm_header_timer()
        super().data_received(data)
        if (
            self._awaiting_headers
            and self._header_bytes > self.max_header_bytes
            and not self.transport.is_closing()
        ):
            log.warning(
                "closing %s: request headers over %d bytes", self.client, self.max_header_bytes
            )
            self.transport.write(_TOO_LARGE)
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._header_bytes = 0
        self._cancel_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers = True  # whatever arrives next starts a new request

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

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
                "closing %s: no complete request headers in %ss", self.client, self.header_timeout_s
            )
            self.transport.close()
