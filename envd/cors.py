"""Permissive CORS as the reference envd's rs/cors setup; outermost in the middleware chain,
so preflights are answered before any auth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from starlette.datastructures import Headers

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

_CORS_EXPOSED: Final = (
    b"Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, "
    b"X-Content-Type-Options"
)
# OPTIONS is always allowed for a preflight (rs/cors does the same).
_CORS_METHODS: Final = frozenset({"HEAD", "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CORS_MAX_AGE_S: Final = 7200


class CORSMiddleware:
    """Permissive CORS as the reference's rs/cors setup: any origin, any request header,
    preflights answered (204) before auth, CORS headers only for requests with an Origin."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        requested = headers.get("access-control-request-method")
        if scope["method"] == "OPTIONS" and requested:
            await self._preflight(headers, requested.upper(), send)
            return
        cors: list[tuple[bytes, bytes]] = [(b"vary", b"Origin")]  # rs/cors always varies
        if "origin" in headers and scope["method"] in _CORS_METHODS:
            cors += [
                (b"access-control-allow-origin", b"*"),
                (b"access-control-expose-headers", _CORS_EXPOSED),
            ]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    @staticmethod
    async def _preflight(headers: Headers, method: str, send: Send) -> None:
        raw: list[tuple[bytes, bytes]] = [
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
        ]
        if "origin" in headers and method in _CORS_METHODS:
            raw += [
                (b"access-control-allow-origin", b"*"),
                (b"access-control-allow-methods", method.encode()),
                (b"access-control-max-age", str(CORS_MAX_AGE_S).encode()),
            ]
            requested_headers = headers.get("access-control-request-headers")
            if requested_headers:  # "allowed headers: *" reflects what was asked for
                raw.append((b"access-control-allow-headers", requested_headers.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": raw})
        await send({"type": "http.response.body", "body": b""})
