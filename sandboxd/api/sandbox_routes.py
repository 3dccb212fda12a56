"""The sandbox endpoints: create and connect (v1 and v2), get, list (v1 and v2), kill, resume,
pause, timeout, network rules, and sandbox and team metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import listing, params, responses
from sandboxd.api.bodies import CREATE_LIMIT, read_json
from sandboxd.api.errors import RequestError
from sandboxd.api.idempotency import IdempotentCreates
from sandboxd.api.metrics import sandbox_metrics, team_metrics
from sandboxd.api.request_models import (
    ConnectV2,
    NetworkUpdate,
    NewSandbox,
    NewSandboxV2,
    Pause,
    Resume,
    Timeout,
)
from sandboxd.errors import SandboxNotFound
from sandboxd.lifecycle.egress import update_network
from sandboxd.lifecycle.sandbox import CreateRequest

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.lifecycle.manager import SandboxManager
    from sandboxd.store.interface import Store

UNIX_S_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z: the last second RFC 3339 can write


def _request(body: NewSandbox) -> CreateRequest:
    # Kept under their wire names (shown by GET; CreateRequest says which are enforced).
    kept = {"network", "allow_internet_access", "mcp", "volumeMounts", "autoResume",
            "autoPauseMemory"}  # fmt: skip
    options: dict[str, Any] = body.model_dump(include=kept, exclude_none=True)
    return CreateRequest(body.templateID, body.timeout, body.secure, body.autoPause,
                         body.metadata or {}, body.envVars or {}, options)  # fmt: skip


def routes(manager: SandboxManager, store: Store, domain: str) -> list[Route]:
    """`domain`: serve's, where the SDKs reach the sandboxes' ports (`get_host()`)."""
    idempotent = IdempotentCreates()

    async def _create(request: Request, model: type[NewSandbox]) -> Response:
        spec = _request(await read_json(request, model, limit=CREATE_LIMIT))
        key = request.headers.get("idempotency-key")
        if key is None:
            return JSONResponse(responses.sandbox(manager, await manager.create(spec), domain), 201)

        async def create() -> str:
            return (await manager.create(spec)).id

        sandbox_id = await idempotent.run(request.headers["x-api-key"], key, create)
        sandbox = manager.get(sandbox_id)
        if sandbox is None:
            raise RequestError(409, f"the sandbox created with this Idempotency-Key "
                                    f"({sandbox_id}) is gone")  # fmt: skip
        return JSONResponse(responses.sandbox(manager, sandbox, domain), 201)

    async def create(request: Request) -> Response:
        return await _create(request, NewSandbox)

    async def create_v2(request: Request) -> Response:
        return await _create(request, NewSandboxV2)

    async def get(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        sandbox = manager.get(sandbox_id)  # one whose kill stopped halfway is still shown
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        return JSONResponse(responses.detail(sandbox, domain))

    async def kill(request: Request) -> Response:
        await manager.kill(params.sandbox_id(request))
        return Response(status_code=204)

    async def _connect(sandbox_id: str, timeout_s: int) -> Response:
        sandbox, resumed = await manager.connect(sandbox_id, timeout_s)
        return JSONResponse(responses.sandbox(manager, sandbox, domain), 201 if resumed else 200)

    async def connect(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        return await _connect(sandbox_id, (await read_json(request, Timeout)).timeout)

    async def connect_v2(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        body = await read_json(request, ConnectV2, optional=True)
        if not body.memory:
            # A frozen container keeps its memory: it cannot boot again from its disk alone.
            raise RequestError(400, "validation error: memory: false (a cold boot) is not offered")
        return await _connect(sandbox_id, body.timeout)

    async def resume(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        body = await read_json(request, Resume, optional=True)
        sandbox = await manager.resume(sandbox_id, body.timeout)
        return JSONResponse(responses.sandbox(manager, sandbox, domain), 201)

    async def pause(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        await read_json(request, Pause, optional=True)  # memory: false is not offered
        await manager.pause(sandbox_id)
        return Response(status_code=204)

    async def set_timeout(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        body = await read_json(request, Timeout)
        await manager.set_timeout(sandbox_id, body.timeout)
        return Response(status_code=204)

    async def set_network(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        body = await read_json(request, NetworkUpdate)
        await update_network(manager, sandbox_id, body.model_dump(exclude_none=True))
        return Response(status_code=204)

    async def list_v2(request: Request) -> Response:
        query = listing.parse(request)
        template_ids = None
        if query.template is not None:
            template = store.template(query.template)
            template_ids = {template.template_id} if template else set()
        found = [s for s in manager.all() if listing.matches(s, query, template_ids)]
        items, token = listing.page(found, query)
        headers = {}
        if token is not None:
            headers["X-Next-Token"] = token
        if "running" in query.states:
            headers["X-Total-Running"] = str(sum(s.running for s in found))
        return JSONResponse([responses.listed(s) for s in items], headers=headers)

    async def list_v1(request: Request) -> Response:
        wanted = params.metadata_filter(request)
        found = [s for s in manager.all() if s.running
                 and all(s.row.metadata.get(k) == v for k, v in wanted.items())]  # fmt: skip
        found.sort(key=lambda s: (-s.row.started_at, s.row.sandbox_id))
        return JSONResponse([responses.listed(s) for s in found])

    async def metrics(request: Request) -> Response:
        sandbox_id = params.sandbox_id(request)
        start, end = _range(request)
        return JSONResponse(sandbox_metrics(store, sandbox_id, start, end))

    async def team(request: Request) -> Response:
        if request.path_params["team_id"] != responses.TEAM_ID:
            raise RequestError(
                403, f"You (team {responses.TEAM_ID}) don't have access to this team"
            )
        start, end = _range(request)
        return JSONResponse(team_metrics(store, start, end))

    return [
        Route("/sandboxes", create, methods=["POST"]),
        Route("/sandboxes", list_v1, methods=["GET"]),
        Route("/v2/sandboxes", create_v2, methods=["POST"]),
        Route("/v2/sandboxes", list_v2, methods=["GET"]),
        Route("/sandboxes/{sandbox_id}", get, methods=["GET"]),
        Route("/sandboxes/{sandbox_id}", kill, methods=["DELETE"]),
        Route("/sandboxes/{sandbox_id}/connect", connect, methods=["POST"]),
        Route("/v2/sandboxes/{sandbox_id}/connect", connect_v2, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/resume", resume, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/pause", pause, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/timeout", set_timeout, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/network", set_network, methods=["PUT"]),
        Route("/sandboxes/{sandbox_id}/metrics", metrics, methods=["GET"]),
        Route("/teams/{team_id}/metrics", team, methods=["GET"]),
    ]


def _range(request: Request) -> tuple[int | None, int | None]:
    start = params.query_int(request, "start", 0, UNIX_S_MAX)
    end = params.query_int(request, "end", 0, UNIX_S_MAX)
    if start is not None and end is not None and start > end:
        raise RequestError(400, "Invalid time range for metrics")
    return start, end
