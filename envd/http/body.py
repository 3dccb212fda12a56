"""Request bodies that are read whole (the JSON of /init and /files/compose): read as they
arrive and refused as soon as they pass a cap, so one request cannot grow the daemon without
bound. The Connect services apply the same cap to each message (app.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from starlette.requests import Request

# The E2B SDKs' default maximum Connect message size, and connectrpc's too. It also covers the
# largest /init env map a process could use: the kernel refuses to exec with more than
# ARG_MAX (2 MiB under the default 8 MiB stack) of arguments and environment.
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024


class BodyTooLargeError(Exception):
    """The request body is over `limit` bytes (declared, or seen while reading)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


async def read_capped(request: Request, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """The whole body, refused without reading on when it is over `limit` bytes.

    Raises:
        BodyTooLargeError: the body is, or says it is, over `limit` bytes.
        ClientDisconnect: the client went away before the end of the body.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLargeError(limit)
    return bytes(body)
