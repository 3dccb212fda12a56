"""The template endpoints over sandboxd.templates: list, get, by alias, `POST /v2/templates` (a
record over base's root filesystem), `PATCH` (public) and delete; E2B's build routes answer
"not supported" (sandboxd/api/unserved.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import responses, unserved
from sandboxd.api.bodies import read_json
from sandboxd.api.request_models import NewTemplate, TemplateUpdate

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.templates import Templates


def routes(templates: Templates) -> list[Route]:
    async def list_templates(_: Request) -> Response:
        return JSONResponse([responses.template(t) for t in templates.all()])

    async def get_template(request: Request) -> Response:
        template = templates.get(request.path_params["template_id"])
        return JSONResponse(responses.template_detail(template))

    async def by_alias(request: Request) -> Response:
        template = templates.get(request.path_params["alias"])
        return JSONResponse({"templateID": template.template_id, "public": template.public})

    async def create_v2(request: Request) -> Response:
        body = await read_json(request, NewTemplate)
        template = await templates.create_over_base(
            body.alias, body.cpuCount, body.memoryMB, body.diskSizeMB
        )
        return JSONResponse(responses.template(template), 202)

    async def update(request: Request) -> Response:
        template = templates.get(request.path_params["template_id"])
        body = await read_json(request, TemplateUpdate, optional=True)
        if body.public is not None:
            await templates.set_public(template, body.public)
        return JSONResponse(None)

    async def delete(request: Request) -> Response:
        await templates.delete(request.path_params["template_id"])
        return Response(status_code=204)

    # {…:path}: names such as team/name:tag arrive percent-encoded as one segment. The routes
    # by id take any path below /templates: the unserved E2B routes go before them.
    return [
        Route("/templates", list_templates, methods=["GET"]),
        Route("/v2/templates", create_v2, methods=["POST"]),
        Route("/templates/aliases/{alias:path}", by_alias, methods=["GET"]),
        *unserved.routes(),
        Route("/templates/{template_id:path}", get_template, methods=["GET"]),
        Route("/templates/{template_id:path}", update, methods=["PATCH"]),
        Route("/templates/{template_id:path}", delete, methods=["DELETE"]),
    ]
