"""GET /envs: every variable in the env store (internal and /init-provided), keys sorted, as
the reference's compact JSON encoder writes them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.responses import Response
from starlette.routing import BaseRoute, Route

if TYPE_CHECKING:
    from starlette.requests import Request

    from envd.state import SandboxState


def routes(state: SandboxState) -> list[BaseRoute]:
    async def envs(_: Request) -> Response:
        body = (
            json.dumps(state.env(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
            + "\n"
        )
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    return [Route("/envs", envs, methods=["GET"])]
