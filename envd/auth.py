"""Who may call: the X-Access-Token check and the Basic-auth user check, as the reference
envd's middleware does them; the request gate (gate.py) applies them after CORS, token
first, then the user."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Final

from envd.errors import json_error
from envd.users import UnknownUserError, basic_auth_username

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

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


def token_refused(state: SandboxState, method: str, path: str, token: bytes | None) -> bool:
    """Whether a request must be refused for its X-Access-Token (raw header bytes: the
    reference compares bytes): once /init has set a token, every non-exempt request must
    carry it."""
    return (
        state.access_token is not None
        and (method, path) not in TOKEN_EXEMPT
        and not state.token_matches(token)
    )


async def send_token_refusal(scope: Scope, receive: Receive, send: Send) -> None:
    await json_error(401, UNAUTHORIZED_MESSAGE)(scope, receive, send)


def unknown_user_message(users: UserCache, authorization: str | None) -> str | None:
    """The refusal for a Basic-auth header naming an unknown user (on every route, as the
    reference envd's authn middleware), or None when the header is absent, not Basic, or
    names a user that exists."""
    username = basic_auth_username(authorization)
    if username is None:
        return None
    try:
        users.lookup(username)
    except UnknownUserError:
        return f"invalid username: '{username}'"
    return None


async def send_unauthenticated(content_type: str | None, message: str, send: Send) -> None:
    """connect-go's error writer: an end-of-stream frame (HTTP 200) for Connect streaming
    requests, else the Connect unary JSON error (also for plain HTTP routes)."""
    error = {"code": "unauthenticated", "message": message}
    media = (content_type or "").partition(";")[0].strip().lower()
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
