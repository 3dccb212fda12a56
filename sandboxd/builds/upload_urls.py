"""The upload URLs `GET /templates/{id}/files/{hash}` hands out: the SDKs PUT the build context
to that URL with a client of their own and no API key (E2B's are presigned bucket URLs), so the
URL carries its own authorisation: an expiry and an HMAC of the template, hash and expiry under
serve's secret. Only that one upload, until then."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

PATH_PREFIX = "/uploads/"  # outside the API key's middleware: the signature is the key
VALID_S = 3600  # the SDKs' upload timeout is an hour


def _signature(secret: bytes, template_id: str, files_hash: str, expires: int) -> str:
    message = f"upload\n{template_id}\n{files_hash}\n{expires}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def signed_path(secret: bytes, template_id: str, files_hash: str, now: float | None = None) -> str:
    """The path and query of the upload URL (the caller adds the scheme and host)."""
    expires = int((time.time() if now is None else now) + VALID_S)
    query = urlencode(
        {"expires": expires, "signature": _signature(secret, template_id, files_hash, expires)}
    )
    return f"{PATH_PREFIX}{template_id}/{files_hash}?{query}"


def check(secret: bytes, template_id: str, files_hash: str, expires: str, signature: str) -> str:
    """'' when the URL is valid now, else why not."""
    if not expires.isdigit():
        return "the upload URL has no valid expiry"
    if int(expires) < time.time():
        return "the upload URL has expired"
    wanted = _signature(secret, template_id, files_hash, int(expires))
    if not hmac.compare_digest(wanted, signature):
        return "the upload URL's signature is not valid"
    return ""
