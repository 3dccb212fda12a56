"""Signed /files URLs: the reference envd's v1 signature, and the check GET and POST /files
make instead of the access-token middleware (they are exempt from it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import TYPE_CHECKING

from envd.errors import EnvdHTTPError

if TYPE_CHECKING:
    from envd.state import SandboxState


def file_signature(
    path: str, operation: str, username: str, token: str, expiration: int | str | None
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
