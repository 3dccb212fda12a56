"""`GET /sandboxes/{id}/logs` (v1: `start` in Unix ms, `limit`; what the E2B CLI's
`sandbox logs` reads, each line a JSON object with `level` and `logger`) and
`GET /v2/sandboxes/{id}/logs` (`cursor` in Unix ms, `limit`, `direction` forward or backward),
from the sandbox's log as its node keeps it (sandboxd.node.service), running or paused."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import params
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.teams import owned_sandbox_id
from sandboxd.ids import rfc3339

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.node.models import LogEntry

MAX_LIMIT = 1000
UNIX_MS_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
DIRECTIONS = ("forward", "backward")


def _entry(e: LogEntry) -> dict[str, Any]:
    """E2B's SandboxLogEntry."""
    return {"timestamp": rfc3339(e.timestamp_us), "level": e.level, "message": e.message,
            "fields": {"logger": e.logger}}  # fmt: skip


async def _read(request: Request, since_ms: int | None, until_ms: int | None, limit: int,
                newest_first: bool) -> list[LogEntry]:  # fmt: skip
    since = None if since_ms is None else since_ms * 1000
    until = None if until_ms is None else until_ms * 1000 + 999
    sandbox_id = await owned_sandbox_id(request)
    return await context(request).node.logs(sandbox_id, since, until, limit, newest_first)


async def logs_v1(request: Request) -> Response:
    start = params.query_int(request, "start", 0, UNIX_MS_MAX)
    limit = params.query_int(request, "limit", 1, MAX_LIMIT) or MAX_LIMIT
    entries = await _read(request, start, None, limit, newest_first=False)
    return JSONResponse({
        "logs": [{"timestamp": rfc3339(e.timestamp_us),
                  "line": json.dumps({"level": e.level, "logger": e.logger,
                                      "message": e.message})} for e in entries],
        "logEntries": [_entry(e) for e in entries],
    })  # fmt: skip


async def logs_v2(request: Request) -> Response:
    cursor = params.query_int(request, "cursor", 0, UNIX_MS_MAX)
    limit = params.query_int(request, "limit", 0, MAX_LIMIT)
    direction = request.query_params.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise RequestError(400, f"validation error: direction: {direction!r} is not "
                                "forward or backward")  # fmt: skip
    backward = direction == "backward"
    entries = await _read(request, None if backward else cursor, cursor if backward else None,
                          MAX_LIMIT if limit is None else limit, newest_first=backward)  # fmt: skip
    return JSONResponse({"logs": [_entry(e) for e in entries]})


def routes() -> list[Route]:
    return [
        Route("/sandboxes/{sandbox_id}/logs", logs_v1, methods=["GET"]),
        Route("/v2/sandboxes/{sandbox_id}/logs", logs_v2, methods=["GET"]),
    ]
