"""What GET and POST /files share: query parameters, the signature check, the user and the
resolved path, and the tiny JSON entry the HTTP file APIs answer with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from envd.errors import EnvdHTTPError
from envd.http.query import parse_query
from envd.http.signing import check_file_access
from envd.users import UnknownUserError, User, UserCache, expand_path
from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from starlette.requests import Request

    from envd.state import SandboxState

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_GO_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


class InvalidParameterError(Exception):
    """A typed query parameter that does not parse. The reference envd's generated router
    answers these itself, in plain text rather than the JSON error form (the app's exception
    handler does that here)."""

    def __init__(self, name: str, value: str, reason: str) -> None:
        super().__init__(
            f"Invalid format for parameter {name}: error binding string parameter: "
            f'strconv.ParseInt: parsing "{value}": {reason}'
        )


@dataclass(frozen=True, slots=True)
class FileRequest:
    user: User
    # The `path` query value as sent, None when absent.
    path_param: str | None

    @property
    def raw_path(self) -> str:
        """The `path` query value, "" when absent, as signatures and messages use it."""
        return self.path_param or ""


def _parse_int64(name: str, value: str) -> int:
    if not _GO_DECIMAL.fullmatch(value):
        raise InvalidParameterError(name, value, "invalid syntax")
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise InvalidParameterError(name, value, "value out of range")
    return number


def resolve_user(username: str | None, state: SandboxState, users: UserCache) -> User:
    """The named user, or the default user when no name was given.

    Raises:
        EnvdHTTPError: 401 for an unknown user (the reference envd's message).
    """
    name = username or state.default_user
    try:
        return users.lookup(name)
    except UnknownUserError as exc:
        raise EnvdHTTPError(401, f"error looking up user '{name}': {exc}") from None


def resolve_path(path: str, user: User, state: SandboxState) -> str:
    """The reference's path resolution (users.expand_path); `~other` and NUL bytes are the
    caller's error (400)."""
    try:
        return expand_path(path, user, state.default_workdir)
    except ValueError as exc:
        raise EnvdHTTPError(400, f"error resolving path: {exc}") from None


def authorize_file_request(
    request: Request,
    state: SandboxState,
    users: UserCache,
    operation: str,
    header_token: str | None,
) -> FileRequest:
    """Check the signature (or `header_token`, the X-Access-Token header) of a GET/POST
    /files request and find its user.

    Raises:
        InvalidParameterError: `signature_expiration` is not a 64-bit integer.
        EnvdHTTPError: 401 for a bad signature or an unknown user.
    """
    query = parse_query(request.scope["query_string"])
    raw_expiration = query.get("signature_expiration")
    expiration = (
        None if raw_expiration is None else _parse_int64("signature_expiration", raw_expiration)
    )
    path_param = query.get("path")
    username = query.get("username")
    check_file_access(
        state,
        operation=operation,
        path=path_param or "",
        username=username or "",
        header_token=header_token,
        signature=query.get("signature"),
        expiration=expiration,
    )
    return FileRequest(resolve_user(username, state, users), path_param)


def entry_json(path: str, metadata: dict[str, str] | None = None) -> dict[str, object]:
    """The HTTP APIs' EntryInfo: path, name, type "file", and metadata only when non-empty."""
    path = valid_utf8(path)
    entry: dict[str, object] = {"path": path, "name": path.rstrip("/").rsplit("/", 1)[-1]}
    entry["type"] = "file"
    if metadata:
        entry["metadata"] = metadata
    return entry
