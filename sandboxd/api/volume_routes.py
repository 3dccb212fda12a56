"""The volume endpoints over sandboxd.volumes.catalog: create, list, get (each create and get
hands out a fresh token for the content API, sandboxd/api/volume_content.py) and delete."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api.bodies import read_json
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.request_models import NewVolume
from sandboxd.api.teams import team_of

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.api.context import Volumes
    from sandboxd.store.rows import VolumeRow


def volume_id(request: Request) -> str:
    """The path's volume id.

    Raises:
        RequestError: 400 `Invalid volume ID` (not a UUID, the reference's words).
    """
    raw: str = request.path_params["volume_id"]
    try:
        uuid.UUID(raw)
    except ValueError:
        raise RequestError(400, "Invalid volume ID") from None
    return raw


def _with_token(catalog: Volumes, row: VolumeRow) -> dict[str, Any]:
    return {
        "volumeID": row.volume_id,
        "name": row.name,
        "token": catalog.tokens.mint(row.volume_id),
    }


async def create_volume(request: Request) -> Response:
    body = await read_json(request, NewVolume)
    catalog = context(request).volumes
    row = await catalog.create(body.name, body.sizeMB, team_of(request))
    return JSONResponse(_with_token(catalog, row), 201)


async def list_volumes(request: Request) -> Response:
    rows = context(request).volumes.all(team_of(request))
    return JSONResponse([{"volumeID": v.volume_id, "name": v.name} for v in rows])


async def get_volume(request: Request) -> Response:
    catalog = context(request).volumes
    row = catalog.get(volume_id(request), team_of(request))
    return JSONResponse(_with_token(catalog, row))


async def delete_volume(request: Request) -> Response:
    await context(request).volumes.delete(volume_id(request), team_of(request))
    return Response(status_code=204)


def routes() -> list[Route]:
    return [
        Route("/volumes", create_volume, methods=["POST"]),
        Route("/volumes", list_volumes, methods=["GET"]),
        Route("/volumes/{volume_id}", get_volume, methods=["GET"]),
        Route("/volumes/{volume_id}", delete_volume, methods=["DELETE"]),
    ]
