"""The control API's errors, all answered as `{"code": status, "message": ...}`: the request
errors the API itself finds (a body, a parameter, a header), and the one table that maps the
domain's errors (sandboxd.errors) to HTTP statuses."""

from __future__ import annotations

import json

from starlette.responses import Response

from sandboxd.errors import (
    BadUpload,
    BootError,
    BuildNodeLost,
    DiskFull,
    InitRefused,
    LengthRequired,
    NodeLost,
    NotAllowed,
    NotFound,
    RegistryError,
    SandboxError,
    StoreUnavailable,
    TemplateError,
    UploadTooLarge,
    VolumeFull,
    VolumeNodeUnavailable,
    WrongState,
)


class RequestError(Exception):
    """A request the API cannot take as asked; `status` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# First match wins: subclasses before their bases. What is not here is a 500.
_STATUSES: tuple[tuple[type[SandboxError], int], ...] = (
    (NotFound, 404),
    (WrongState, 409),
    (NotAllowed, 400),
    (LengthRequired, 411),
    (UploadTooLarge, 413),
    (BadUpload, 400),
    (VolumeFull, 507),
    (DiskFull, 507),
    (NodeLost, 502),  # E2B's status for a sandbox its proxy cannot reach
    (BuildNodeLost, 502),
    (BootError, 503),  # nothing of the sandbox is left: trying again may work
    (StoreUnavailable, 503),
    (VolumeNodeUnavailable, 503),
    (RegistryError, 503),  # the registry is down or refused: nothing was half-done
    (TemplateError, 500),
)


def status_of(exc: SandboxError) -> int:
    if isinstance(exc, InitRefused):
        return 413 if exc.too_large else 400
    for kind, status in _STATUSES:
        if isinstance(exc, kind):
            return status
    return 500


def error_response(status: int, message: str) -> Response:
    body = json.dumps({"code": status, "message": message})
    return Response(body, status_code=status, media_type="application/json")
