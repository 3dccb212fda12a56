"""RequestGate: the one middleware every request passes through.

It does what the reference envd's middleware chain does, in the same order: CORS (preflights
answered before any auth, cors.py), the access token, then the Basic-auth user (auth.py); and
it is the outermost guard, answering an exception that escaped every handler as JSON 500
instead of letting it drop the keep-alive connection. Connect RPCs then go straight to their
service and the busiest plain-HTTP routes to their endpoint (envd.http.endpoint); everything
else to the router.

One layer rather than a middleware per concern, reading the few headers it needs in a single
scan: every layer costs each request a coroutine and each response message another, which
for a small upload or a Stat was a good part of envd's CPU.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from envd import cors
from envd.auth import send_token_refusal, send_unauthenticated, token_refused, unknown_user_message
from envd.errors import json_error
from envd.header_bytes import first_values, text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from envd.state import SandboxState
    from envd.users import UserCache

log = logging.getLogger("envd.errors")

_ORIGIN: Final = b"origin"
_PREFLIGHT_METHOD: Final = b"access-control-request-method"
_PREFLIGHT_HEADERS: Final = b"access-control-request-headers"
_AUTHORIZATION: Final = b"authorization"
_ACCESS_TOKEN: Final = b"x-access-token"
_CONTENT_TYPE: Final = b"content-type"
_READ: Final = frozenset(
    {_ORIGIN, _PREFLIGHT_METHOD, _PREFLIGHT_HEADERS, _AUTHORIZATION, _ACCESS_TOKEN, _CONTENT_TYPE}
)


class RequestGate:
    """CORS, token, Basic-auth user and the last-resort 500, then the request's handler:
    `services` maps a Connect service's path prefix ("/filesystem.Filesystem/") to its app,
    `endpoints` a method and exact path to theirs, and any other request goes to `app`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        state: SandboxState,
        users: UserCache,
        services: Mapping[str, ASGIApp],
        endpoints: Mapping[tuple[str, str], ASGIApp],
    ) -> None:
        self.app = app
        self.state = state
        self.users = users
        self.services = services
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = first_values(scope["headers"], _READ)
        method: str = scope["method"]
        has_origin = _ORIGIN in headers
        requested = headers.get(_PREFLIGHT_METHOD)
        if method == "OPTIONS" and requested:
            preflight_headers = text(headers.get(_PREFLIGHT_HEADERS))
            await cors.answer_preflight(
                has_origin, requested.decode("latin-1").upper(), preflight_headers, send
            )
            return
        cors_headers = cors.response_headers(has_origin, method)
        started = False

        async def send_with_cors(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *cors_headers]}
            await send(message)

        try:
            await self._authorized(scope, receive, send_with_cors, headers)
        except Exception:
            log.exception("unexpected error in %s %s", method, scope["path"])
            if not started:  # on the bare send: this 500 carries no CORS headers
                await json_error(500, "internal error")(scope, receive, send)

    async def _authorized(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        if token_refused(self.state, method, path, headers.get(_ACCESS_TOKEN)):
            await send_token_refusal(scope, receive, send)
            return
        refusal = unknown_user_message(self.users, text(headers.get(_AUTHORIZATION)))
        if refusal is not None:
            await send_unauthenticated(text(headers.get(_CONTENT_TYPE)), refusal, send)
            return
        handler = self.endpoints.get((method, path))
        if handler is None:
            handler = self.services.get(path[: path.find("/", 1) + 1], self.app)
        await handler(scope, receive, send)
