"""The snapshot endpoints: take one of a running sandbox, and list them (newest first, by
sandbox or name, paged by `X-Next-Token`). A snapshot is a template (sandboxd.templates.
snapshots): a create boots it by its id, and `DELETE /templates/{snapshotID}` deletes it
(sandboxd/api/template_routes.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import params
from sandboxd.api.bodies import read_json
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.listing import MAX_LIMIT, decode_token, encode_token
from sandboxd.api.request_models import NewSnapshot
from sandboxd.api.teams import owned_sandbox, team_of
from sandboxd.templates.snapshots import SnapshotRecords, parse_name

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.templates.snapshots import Listed


async def create(request: Request) -> Response:
    api = context(request)
    sandbox_id = params.sandbox_id(request)
    body = await read_json(request, NewSnapshot)
    if body.name is not None:  # its namespace the caller's team's, before anything else
        parse_name(body.name, _slug(request))
    await owned_sandbox(request)
    taken = await api.node.snapshot(sandbox_id, body.name)
    return JSONResponse({"snapshotID": taken.snapshot_id, "names": taken.names}, 201)


async def list_snapshots(request: Request) -> Response:
    query = request.query_params
    name = parse_name(query["name"], _slug(request)) if query.get("name") else None
    limit = _limit(request)
    token = query.get("nextToken")
    after = decode_token(token, ascending=False) if token else None
    records = SnapshotRecords(context(request).store)
    found = records.listed(team_of(request), query.get("sandboxID") or None, name)
    if after is not None:
        found = [s for s in found if (-s.created_at, s.template_id) > (-after[0], after[1])]
    page = found[:limit]
    headers = {}
    if len(found) > limit:
        headers["X-Next-Token"] = encode_token(_key(page[-1]), ascending=False)
    return JSONResponse([{"snapshotID": s.snapshot_id, "names": s.names} for s in page],
                        headers=headers)  # fmt: skip


def _slug(request: Request) -> str:
    return SnapshotRecords(context(request).store).slug(team_of(request))


def _key(listed: Listed) -> tuple[int, str]:
    return listed.created_at, listed.template_id


def _limit(request: Request) -> int:
    """`limit`: 100 when absent or 0 (the SDKs leave it out then), clamped to 1..100 as the
    reference does. Raises RequestError 400 when it is not an integer."""
    raw = request.query_params.get("limit")
    if not raw:
        return MAX_LIMIT
    try:
        value = int(raw, 10)
    except ValueError:
        raise RequestError(400, f"validation error: limit: {raw!r} is not an integer") from None
    return min(max(value, 1), MAX_LIMIT) if value else MAX_LIMIT


def routes() -> list[Route]:
    return [
        Route("/sandboxes/{sandbox_id}/snapshots", create, methods=["POST"]),
        Route("/snapshots", list_snapshots, methods=["GET"]),
    ]
