"""Endpoint: a plain-HTTP route the request gate calls directly, past Starlette's exception
middleware and router (GET and POST /files, the busiest routes: that plumbing cost a small
upload more CPU than its handler). The handler is written as for Starlette, a Request in and
a Response out; its errors are answered as the app's exception handlers answer them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from envd.errors import EnvdHTTPError, json_error
from envd.http.file_request import InvalidParameterError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

    Handler = Callable[[Request], Awaitable[ASGIApp]]


class BytesResponse:
    """A whole body with its Content-Type, sent as Starlette's Response sends it, minus the
    per-call header building (the answer to every small upload)."""

    __slots__ = ("body", "headers")

    def __init__(self, body: bytes, content_type: bytes) -> None:
        self.body = body
        self.headers = [(b"content-length", b"%d" % len(body)), (b"content-type", content_type)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def error_response(exc: EnvdHTTPError | InvalidParameterError) -> Response:
    """The answer to a handler's error, on an endpoint or a Starlette route alike."""
    if isinstance(exc, InvalidParameterError):
        # The reference's generated router answers a typed query parameter that does not
        # parse itself: plain text, not the JSON error form.
        return PlainTextResponse(f"{exc}\n", status_code=400)
    return json_error(exc.status, exc.message)


class Endpoint:
    """An ASGI app running one handler (a class, not a function: Starlette's Route would take
    a function for a request handler and wrap it again)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: ASGIApp
        try:
            response = await self.handler(Request(scope, receive))
        except (EnvdHTTPError, InvalidParameterError) as exc:
            response = error_response(exc)
        await response(scope, receive, send)
