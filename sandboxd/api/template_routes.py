"""The template endpoints. A template is a root filesystem plus its record; until templates are
built from steps, `POST /v2/templates` makes a new record over the base root filesystem with
its own CPU and memory (a `ready` build at once)."""

from __future__ import annotations

import functools
import secrets
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import responses, unserved
from sandboxd.api.bodies import read_json
from sandboxd.api.request_models import NewTemplate, TemplateUpdate
from sandboxd.errors import RequestError
from sandboxd.lifecycle.manager import ID_ALPHABET, now_us
from sandboxd.store import TemplateRow

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.lifecycle.manager import SandboxManager
    from sandboxd.store import Store

BASE = "base"


def new_template_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(20))


def new_build_id() -> str:
    hexed = secrets.token_hex(16)
    return f"{hexed[:8]}-{hexed[8:12]}-4{hexed[13:16]}-8{hexed[17:20]}-{hexed[20:]}"


def _existing(store: Store, template_id: str) -> TemplateRow:
    template = store.template(template_id)
    if template is None:
        raise RequestError(404, f"template '{template_id}' not found")
    return template


def routes(manager: SandboxManager, store: Store) -> list[Route]:
    async def list_templates(_: Request) -> Response:
        return JSONResponse([responses.template(t) for t in store.templates()])

    async def get_template(request: Request) -> Response:
        template = _existing(store, request.path_params["template_id"])
        return JSONResponse(responses.template_detail(template))

    async def by_alias(request: Request) -> Response:
        template = _existing(store, request.path_params["alias"])
        return JSONResponse({"templateID": template.template_id, "public": template.public})

    async def create_v2(request: Request) -> Response:
        body = await read_json(request, NewTemplate)
        base = _existing(store, BASE)
        now = now_us()
        template = store.template(body.alias)
        if template is None:  # an alias already ours gets a new build, as the reference does
            template = TemplateRow(new_template_id(), body.alias, "", base.rootfs, 0, 0,
                                   base.disk_size_mb, "ready", base.envd_version, now, now,
                                   build_count=0)  # fmt: skip
        template.build_id = new_build_id()
        template.cpu_count, template.memory_mb = body.cpuCount, body.memoryMB
        if body.diskSizeMB is not None:
            template.disk_size_mb = body.diskSizeMB
        template.build_count += 1
        template.updated_at = now
        await store.write(functools.partial(store.put_template, template))
        return JSONResponse(responses.template(template), 202)

    async def update(request: Request) -> Response:
        template = _existing(store, request.path_params["template_id"])
        body = await read_json(request, TemplateUpdate, optional=True)
        if body.public is not None:
            template.public = body.public
            template.updated_at = now_us()
            await store.write(functools.partial(store.put_template, template))
        return JSONResponse(None)

    async def delete(request: Request) -> Response:
        template = _existing(store, request.path_params["template_id"])
        if template.template_id == BASE:
            raise RequestError(400, "the base template cannot be deleted")
        if manager.uses_template(template.template_id):
            raise RequestError(400, f"template '{template.template_id}' is used by sandboxes")
        await store.write(functools.partial(store.delete_template, template.template_id))
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
