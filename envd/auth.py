"""Who may call and as whom: CORS, the X-Access-Token check, Basic-auth user selection and
signed /files URLs, all as the reference envd does them (its middleware order: CORS outermost,
then the token, then the Basic-auth user)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import struct
import time
from typing import TYPE_CHECKING, Final

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.datastructures import Headers

from envd.errors import EnvdHTTPError, json_error
from envd.users import UnknownUserError, User, lookup_user

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from envd.state import SandboxState

# Routes that authenticate themselves (or need no token): exact method and path.
TOKEN_EXEMPT: Final = frozenset(
    {("GET", "/health"), ("GET", "/files"), ("POST", "/files"), ("POST", "/init")}
)
UNAUTHORIZED_MESSAGE: Final = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)

_CORS_EXPOSED: Final = (
    b"Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, "
    b"X-Content-Type-Options"
)
# OPTIONS is always allowed for a preflight (rs/cors does the same).
_CORS_METHODS: Final = frozenset({"HEAD", "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CORS_MAX_AGE_S: Final = 7200
_END_STREAM_FLAG: Final = 0x02


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


def basic_auth_username(authorization: str | None) -> str | None:
    """The user name of an `Authorization: Basic` header (password ignored), or None.

    Parsed as Go's Request.BasicAuth: "Basic " in any case, strict padded base64, and a colon
    required; "Basic Og==" names the empty user (which then fails the lookup, as in Go).
    """
    if not authorization or authorization[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(authorization[6:], validate=True)
    except binascii.Error:
        return None
    username, colon, _password = decoded.partition(b":")
    if not colon:
        return None
    return username.decode(errors="replace")


class BasicAuthUserMiddleware:
    """Rejects a Basic-auth header naming an unknown user, on every route, as Connect's
    `unauthenticated` (the reference envd's authn middleware)."""

    def __init__(self, app: ASGIApp, users: RecentUsers) -> None:
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


def file_signature(
    path: str, operation: str, username: str, token: str, expiration: int | None
) -> str:
    """The reference envd's v1 signature of a /files URL."""
    text = f"{path}:{operation}:{username}:{token}"
    if expiration is not None:
        text += f":{expiration}"
    digest = hashlib.sha256(text.encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def check_file_access(
    state: SandboxState,
    *,
    operation: str,
    path: str,
    username: str,
    header_token: str | None,
    signature: str | None,
    expiration: int | None,
) -> None:
    """Authorise a GET/POST /files request by header token or URL signature.

    `path` and `username` are the raw query values ("" when absent): the signature covers
    exactly what the client sent, before any resolution.

    Raises:
        EnvdHTTPError: 401 with the reference envd's message.
    """
    token = state.access_token
    if token is None:
        return
    if header_token:  # an empty header counts as absent, as in the reference
        if not state.token_matches(header_token):
            raise EnvdHTTPError(401, "access token present in header but does not match")
        return
    if signature is None:  # an empty one is present, and simply wrong
        raise EnvdHTTPError(401, "missing signature query parameter")
    expected = file_signature(path, operation, username, token, expiration)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise EnvdHTTPError(401, "invalid signature")
    if expiration is not None and expiration < int(time.time()):
        raise EnvdHTTPError(401, "signature is already expired")


class RecentUsers:
    """Users looked up in the last second, shared by the Basic-auth check, every RPC and the
    /files routes (an SDK call would otherwise look its user up twice): a lookup costs 60-250 µs
    (passwd and group files, getgrouplist), as much as the rest of a Stat. Unknown names are
    not kept."""

    TTL_S: Final = 1.0

    def __init__(self, state: SandboxState) -> None:
        self._state = state
        self._users: dict[str, tuple[float, User]] = {}

    def lookup(self, name: str) -> User:
        """lookup_user(name), remembered for TTL_S.

        Raises:
            UnknownUserError: there is no such user.
        """
        now = time.monotonic()
        cached = self._users.get(name)
        if cached is not None and now - cached[0] < self.TTL_S:
            return cached[1]
        user = lookup_user(name)
        if len(self._users) > 64:  # many distinct names: start over rather than grow
            self._users.clear()
        self._users[name] = (now, user)
        return user

    def for_rpc(self, authorization: str | None) -> User:
        """The user an RPC runs as: the Basic-auth user, else the default user.

        Raises:
            ConnectError: UNAUTHENTICATED when that user does not exist.
        """
        username = basic_auth_username(authorization)
        if username is not None:
            try:
                return self.lookup(username)
            except UnknownUserError:
                raise ConnectError(
                    Code.UNAUTHENTICATED, f"invalid username: '{username}'"
                ) from None
        try:
            return self.lookup(self._state.default_user)
        except UnknownUserError:
            raise ConnectError(
                Code.UNAUTHENTICATED, f"invalid default user: '{self._state.default_user}'"
            ) from None
