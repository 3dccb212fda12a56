"""The template endpoints over sandboxd.templates.catalog: list (v1 and v2), get, by alias, `POST
/v2/templates` (a record over base's root filesystem), `PATCH` (public) and delete (snapshots'
too; its running builds stopped, its uploads removed, its unused layers collected). The build flow is
sandboxd/api/build_routes.py; E2B's routes sandboxd does not serve answer "not supported"
(sandboxd/api/unserved.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import build_routes, params, responses, unserved
from sandboxd.api.bodies import read_json
from sandboxd.api.context import context
from sandboxd.api.listing import MAX_LIMIT
from sandboxd.api.request_models import NewTemplate, TemplateUpdate
from sandboxd.api.teams import team_of
from sandboxd.templates.catalog import split_ref

if TYPE_CHECKING:
    from starlette.requests import Request


async def list_templates(request: Request) -> Response:
    listed = context(request).templates.all(team_of(request))
    return JSONResponse([responses.template(t) for t in listed])


async def list_v2(request: Request) -> Response:
    everything = context(request).templates.all(team_of(request))
    limit = params.query_int(request, "limit", 1, MAX_LIMIT) or MAX_LIMIT
    after = request.query_params.get("nextToken")
    start = next((i + 1 for i, t in enumerate(everything) if t.template_id == after), 0)
    page = everything[start : start + limit]
    response = JSONResponse([responses.template(t) for t in page])
    if start + limit < len(everything):
        response.headers["X-Next-Token"] = page[-1].template_id
    return response


async def get_template(request: Request) -> Response:
    templates = context(request).templates
    template = templates.get(request.path_params["template_id"], team_of(request))
    return JSONResponse(
        responses.template_detail(template, templates.store.builds(template.template_id))
    )


async def by_alias(request: Request) -> Response:
    """The team's template of the alias, or a public one."""
    template = context(request).templates.visible(request.path_params["alias"], team_of(request))
    return JSONResponse({"templateID": template.template_id, "public": template.public})


async def create_v2(request: Request) -> Response:
    body = await read_json(request, NewTemplate)
    template = await context(request).templates.create_over_base(
        body.alias, body.cpuCount, body.memoryMB, body.diskSizeMB, team_of(request)
    )
    return JSONResponse(responses.template(template), 202)


async def update(request: Request) -> Response:
    templates = context(request).templates
    template = templates.get(request.path_params["template_id"], team_of(request))
    body = await read_json(request, TemplateUpdate, optional=True)
    if body.public is not None:
        await templates.set_public(template, body.public)
    return JSONResponse(None)


async def update_v2(request: Request) -> Response:
    """The E2B CLI's `template publish` and `unpublish`: a public template is one every
    team's creates may boot; E2B answers the names."""
    templates = context(request).templates
    template = templates.get(request.path_params["template_id"], team_of(request))
    body = await read_json(request, TemplateUpdate, optional=True)
    if body.public is not None:
        await templates.set_public(template, body.public)
    return JSONResponse({"names": responses.template(template)["names"]})


async def delete(request: Request) -> Response:
    """The whole template, whatever tag the id names (a snapshot's id is `name:tag`), as the
    reference deletes it."""
    api = context(request)
    name, _ = split_ref(request.path_params["template_id"])
    template = api.templates.get(name, team_of(request))
    await api.templates.delete(template.template_id)
    await api.builder.forget(template.template_id)
    return Response(status_code=204)


def routes() -> list[Route]:
    # {…:path}: names such as team/name:tag arrive percent-encoded as one segment. The routes
    # by id take any path below /templates: the build routes and the unserved E2B routes go
    # before them, and after the aliases route (`/templates/{id}/tags` would take its paths).
    return [
        Route("/templates", list_templates, methods=["GET"]),
        Route("/v2/templates", list_v2, methods=["GET"]),
        Route("/v2/templates", create_v2, methods=["POST"]),
        Route("/v2/templates/{template_id:path}", update_v2, methods=["PATCH"]),
        Route("/templates/aliases/{alias:path}", by_alias, methods=["GET"]),
        *build_routes.routes(),
        *unserved.routes(),
        Route("/templates/{template_id:path}", get_template, methods=["GET"]),
        Route("/templates/{template_id:path}", update, methods=["PATCH"]),
        Route("/templates/{template_id:path}", delete, methods=["DELETE"]),
    ]
