"""GET /health: 204 once the daemon serves; token-exempt (the SDKs' isRunning())."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import Response
from starlette.routing import BaseRoute, Route

if TYPE_CHECKING:
    from starlette.requests import Request


async def health(_: Request) -> Response:
    return Response(status_code=204, headers={"Cache-Control": "no-store"})


def routes() -> list[BaseRoute]:
    return [Route("/health", health, methods=["GET"])]
