"""Teams at the API edge: the team of the request's key (ApiKeyMiddleware resolves it once and
keeps it in the request's state), the checks that a path's sandbox is the team's, and `GET
/teams`. Another team's sandbox, template, snapshot or volume is answered exactly as an unknown
one, so that a key learns nothing of what is not its team's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import params
from sandboxd.api.context import context
from sandboxd.errors import SandboxNotFound

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Scope

    from sandboxd.node.models import SandboxInfo

_STATE_KEY = "team_id"


def keep_team(scope: Scope, team_id: str) -> None:
    """Record the team of the request's key (the middleware, once per request)."""
    scope.setdefault("state", {})[_STATE_KEY] = team_id


def team_of(request: Request) -> str:
    """The id of the team of the request's API key."""
    team_id: str = request.state.team_id
    return team_id


async def owned_sandbox(request: Request) -> SandboxInfo:
    """The path's sandbox, the team's.

    Raises:
        RequestError: 400 for a malformed id.
        SandboxNotFound: unknown, or another team's (the same answer).
    """
    sandbox_id = params.sandbox_id(request)
    found = await context(request).node.get(sandbox_id)
    if found is None or found.team_id != team_of(request):
        raise SandboxNotFound(sandbox_id)
    return found


async def owned_sandbox_id(request: Request) -> str:
    """The path's sandbox id, once `owned_sandbox` found it the team's. Raises as it does."""
    return (await owned_sandbox(request)).sandbox_id


async def list_teams(request: Request) -> Response:
    """E2B's `Team` list: a key belongs to one team, its default; `apiKey` is the key that
    asked (only hashes of keys are kept)."""
    team = context(request).store.team(team_of(request))
    if team is None:  # deleted from the database under the key: no team to show
        return JSONResponse([])
    return JSONResponse([{"teamID": team.team_id, "name": team.name,
                          "apiKey": request.headers["x-api-key"], "isDefault": True}])  # fmt: skip


def routes() -> list[Route]:
    return [Route("/teams", list_teams, methods=["GET"])]
