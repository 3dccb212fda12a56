"""Permissive CORS as the reference envd's rs/cors setup: any origin, any request header,
preflights answered (204) before any auth, CORS headers only for requests with an Origin.
Applied by the request gate (gate.py), first in its order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from starlette.types import Send

_CORS_EXPOSED: Final = (
    b"Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, "
    b"X-Content-Type-Options"
)
# OPTIONS is always allowed for a preflight (rs/cors does the same).
_CORS_METHODS: Final = frozenset({"HEAD", "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CORS_MAX_AGE_S: Final = 7200

_VARY_ONLY: Final = ((b"vary", b"Origin"),)  # rs/cors always varies
_GRANTED: Final = (
    *_VARY_ONLY,
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", _CORS_EXPOSED),
)


def response_headers(has_origin: bool, method: str) -> tuple[tuple[bytes, bytes], ...]:
    """The CORS headers added to the answer of an ordinary (not preflight) request."""
    return _GRANTED if has_origin and method in _CORS_METHODS else _VARY_ONLY


async def answer_preflight(
    has_origin: bool, method: str, requested_headers: str | None, send: Send
) -> None:
    """Answer a preflight (OPTIONS with Access-Control-Request-Method) with 204."""
    raw: list[tuple[bytes, bytes]] = [
        (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
    ]
    if has_origin and method in _CORS_METHODS:
        raw += [
            (b"access-control-allow-origin", b"*"),
            (b"access-control-allow-methods", method.encode()),
            (b"access-control-max-age", str(CORS_MAX_AGE_S).encode()),
        ]
        if requested_headers:  # "allowed headers: *" reflects what was asked for
            raw.append((b"access-control-allow-headers", requested_headers.encode("latin-1")))
    await send({"type": "http.response.start", "status": 204, "headers": raw})
    await send({"type": "http.response.body", "body": b""})
