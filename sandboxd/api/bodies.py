"""Reading control-API request bodies: capped per route and read incrementally (413 with E2B's
error shape once past the cap, before the rest arrives), nesting refused before parsing (the
JSON parser recurses), and big bodies parsed off the event loop. An authenticated 200 MB body
once took sandboxd to 1.3 GB and stalled `/health` for 7.8 s, and a deeply nested create body
was a 500 (RecursionError)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from starlette.requests import ClientDisconnect

from envd.json_depth import nesting_depth
from sandboxd.api.errors import RequestError
from sandboxd.api.request_models import parse_body

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.api.request_models import Model

# A create carries env vars and metadata: 1 MiB is far beyond a real one and below envd's
# 4 MiB cap on /init, which gets them. Every other body is a few fields.
CREATE_LIMIT: Final = 1 << 20
DEFAULT_LIMIT: Final = 64 << 10
# Real bodies nest 4 levels at most (network rules); the parser's recursion starts to matter
# in the thousands.
DEPTH_LIMIT: Final = 32
# Parsing and validating costs about 10 ms per MiB: a bigger body does it on a thread.
PARSE_ON_LOOP_BELOW: Final = 64 << 10


async def read_bytes(request: Request, limit: int) -> bytes:
    """The whole body, at most `limit` bytes.

    Raises:
        RequestError: 413 once the declared length or the bytes received pass `limit`.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # (its connection cut for a body that did not come in time)
        raise RequestError(400, "the client left before its whole body arrived") from None
    return b"".join(chunks)


def _too_large(limit: int) -> RequestError:
    return RequestError(413, f"the request body is larger than this route takes ({limit} bytes)")


async def read_json(
    request: Request, model: type[Model], *, limit: int = DEFAULT_LIMIT, optional: bool = False
) -> Model:
    """The body as `model` (see `parse_body`), read as `read_bytes` does.

    Raises:
        RequestError: 413 past `limit`; 400 for JSON nested deeper than DEPTH_LIMIT or any
            other bad body.
    """
    raw = await read_bytes(request, limit)
    if nesting_depth(raw) > DEPTH_LIMIT:
        raise RequestError(400, f"validation error: the body nests deeper than {DEPTH_LIMIT}")
    if len(raw) < PARSE_ON_LOOP_BELOW:
        return parse_body(model, raw, optional=optional)
    return await asyncio.to_thread(parse_body, model, raw, optional=optional)
