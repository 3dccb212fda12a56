"""The template-build endpoints (E2B's v3 flow, docs/sandboxd.md "Template builds"): request a
build, the build context's upload URLs and the upload itself (signed, outside the API key),
start, status with its paged log, and tags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import params
from sandboxd.api.bodies import read_json
from sandboxd.api.build_models import AssignTags, NewBuild, RemoveTags
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.request_models import INT32_MAX
from sandboxd.api.teams import team_of
from sandboxd.builds import upload_urls
from sandboxd.builds.recipe import Recipe
from sandboxd.builds.uploads import declared_length
from sandboxd.ids import rfc3339

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.builds.work import BuildWork
    from sandboxd.store.rows import BuildRow

RECIPE_LIMIT = 4 << 20  # a build's steps: thousands of commands fit
LOG_PAGE = 100  # entries per status call at most, as E2B's


async def request_build(request: Request) -> Response:
    body = await read_json(request, NewBuild)
    api = context(request)
    template, build = await api.templates.request_build(
        body.name, body.tags, body.cpuCount, body.memoryMB, body.diskSizeMB, team_of(request)
    )
    await api.builder.assign(build)
    names = [template.alias] if template.alias else []
    return JSONResponse({"templateID": template.template_id, "buildID": build.build_id,
                         "public": template.public, "names": names, "aliases": names,
                         "tags": build.tags}, 202)  # fmt: skip


async def files(request: Request) -> Response:
    api = context(request)
    template = api.templates.get(request.path_params["template_id"], team_of(request))
    files_hash = request.path_params["files_hash"]
    present = await api.builder.present(template.template_id, files_hash)
    # The URL also when present: a step with `forceUpload` uploads whenever it gets one.
    path = upload_urls.signed_path(api.uploads_key, template.template_id, files_hash)
    url = str(request.base_url).rstrip("/") + path
    return JSONResponse({"present": present, "url": url}, 201)


async def upload(request: Request) -> Response:
    api = context(request)
    template_id = request.path_params["template_id"]
    files_hash = request.path_params["files_hash"]
    query = request.query_params
    refusal = upload_urls.check(api.uploads_key, template_id, files_hash,
                                query.get("expires", ""), query.get("signature", ""))  # fmt: skip
    if refusal:
        raise RequestError(403, refusal)
    api.templates.get(template_id)
    length = declared_length(request.headers.get("content-length"))
    await api.builder.receive(template_id, files_hash, request.stream(), length)
    return Response(status_code=200)


async def start_build(request: Request) -> Response:
    api = context(request)
    path = request.path_params
    build = api.templates.build(path["template_id"], path["build_id"], team_of(request))
    recipe = await read_json(request, Recipe, limit=RECIPE_LIMIT)
    await api.builder.start(build, recipe)
    return Response(status_code=202)


async def status(request: Request) -> Response:
    api = context(request)
    path = request.path_params
    build = api.templates.build(path["template_id"], path["build_id"], team_of(request))
    offset = params.query_int(request, "logsOffset", 0, INT32_MAX) or 0
    asked = params.query_int(request, "limit", 0, INT32_MAX)
    limit = LOG_PAGE if asked is None else min(asked, LOG_PAGE)
    return JSONResponse(_status(build, api.builder, offset, limit))


async def assign_tags(request: Request) -> Response:
    body = await read_json(request, AssignTags)
    build = await context(request).templates.assign_tags(body.target, body.tags, team_of(request))
    return JSONResponse({"buildID": build.build_id, "tags": body.tags}, 201)


async def remove_tags(request: Request) -> Response:
    body = await read_json(request, RemoveTags)
    await context(request).templates.remove_tags(body.name, body.tags, team_of(request))
    return Response(status_code=204)


async def list_tags(request: Request) -> Response:
    templates = context(request).templates
    template = templates.get(request.path_params["template_id"], team_of(request))
    rows = templates.store.tags(template.template_id)
    return JSONResponse([{"tag": t.tag, "buildID": t.build_id,
                          "createdAt": rfc3339(t.created_at)} for t in rows])  # fmt: skip


def routes() -> list[Route]:
    return [
        Route("/v3/templates", request_build, methods=["POST"]),
        Route("/templates/tags", assign_tags, methods=["POST"]),
        Route("/templates/tags", remove_tags, methods=["DELETE"]),
        Route("/templates/{template_id}/tags", list_tags, methods=["GET"]),
        Route("/templates/{template_id}/files/{files_hash}", files, methods=["GET"]),
        Route(upload_urls.PATH_PREFIX + "{template_id}/{files_hash}", upload, methods=["PUT"]),
        Route("/v2/templates/{template_id}/builds/{build_id}", start_build, methods=["POST"]),
        Route("/templates/{template_id}/builds/{build_id}/status", status, methods=["GET"]),
    ]


def _status(build: BuildRow, builder: BuildWork, offset: int, limit: int) -> dict[str, Any]:
    entries = [
        {"timestamp": rfc3339(x.at), "level": x.level, "message": x.message}
        | ({"step": x.step} if x.step else {})
        for x in builder.log_page(build, offset, limit)
    ]
    answer: dict[str, Any] = {"templateID": build.template_id, "buildID": build.build_id,
                              "status": build.status, "logs": [e["message"] for e in entries],
                              "logEntries": entries}  # fmt: skip
    if build.reason is not None:
        answer["reason"] = build.reason
    return answer
