"""Who may call: the X-Access-Token check and the Basic-auth user check, as the reference
envd's middleware does them (after CORS, see cors.py; token first, then the user)."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Final

from starlette.datastructures import Headers

from envd.errors import json_error
from envd.users import UnknownUserError, basic_auth_username

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from envd.state import SandboxState
    from envd.users import UserCache

# Routes that authenticate themselves (or need no token): exact method and path.
TOKEN_EXEMPT: Final = frozenset(
    {("GET", "/health"), ("GET", "/files"), ("POST", "/files"), ("POST", "/init")}
)
UNAUTHORIZED_MESSAGE: Final = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)

_END_STREAM_FLAG: Final = 0x02


class AccessTokenMiddleware:
    """Once /init has set a token, every non-exempt request must carry it in X-Access-Token."""

    def __init__(self, app: ASGIApp, state: SandboxState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and self.state.access_token is not None
            and (scope["method"], scope["path"]) not in TOKEN_EXEMPT
            and not self.state.token_matches(_raw_header(scope, b"x-access-token"))
        ):
            await json_error(401, UNAUTHORIZED_MESSAGE)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _raw_header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header as sent (the reference compares bytes)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class BasicAuthUserMiddleware:
    """Rejects a Basic-auth header naming an unknown user, on every route, as Connect's
    `unauthenticated` (the reference envd's authn middleware)."""

    def __init__(self, app: ASGIApp, users: UserCache) -> None:
        self.app = app
        self.users = users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            username = basic_auth_username(headers.get("authorization"))
            if username is not None:
                try:
                    self.users.lookup(username)
                except UnknownUserError:
                    await _send_unauthenticated(headers, f"invalid username: '{username}'", send)
                    return
        await self.app(scope, receive, send)


async def _send_unauthenticated(headers: Headers, message: str, send: Send) -> None:
    """connect-go's error writer: an end-of-stream frame (HTTP 200) for Connect streaming
    requests, else the Connect unary JSON error (also for plain HTTP routes)."""
    error = {"code": "unauthenticated", "message": message}
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    if media.startswith("application/connect+"):
        payload = json.dumps({"error": error}, separators=(",", ":")).encode()
        body = struct.pack(">BI", _END_STREAM_FLAG, len(payload)) + payload
        status = 200
    else:
        body = json.dumps(error, separators=(",", ":")).encode()
        status, media = 401, "application/json"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", media.encode()), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})
