"""The sandbox endpoints: create and connect (v1 and v2), get, list (v1 and v2), kill, resume,
pause, fork, timeout and network rules, over the node service (sandboxd.node.service). Metrics are
sandboxd/api/metrics.py's, logs sandboxd/api/logs.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import listing, params, responses
from sandboxd.api.bodies import CREATE_LIMIT, read_json
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.request_models import (
    ConnectV2,
    Fork,
    NetworkUpdate,
    NewSandbox,
    NewSandboxV2,
    Pause,
    Resume,
    Timeout,
)
from sandboxd.api.teams import owned_sandbox, owned_sandbox_id, team_of
from sandboxd.node.models import SandboxConfig

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.node.models import SandboxInfo


# The reference's refusals of a lifecycle at create, in its words (no "validation error:").
NEEDS_AUTO_PAUSE = "autoPauseMemory=false only applies when autoPause is true."
NO_AUTO_RESUME = (
    "autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume: a "
    "filesystem-only snapshot cannot be auto-resumed by traffic and must be resumed explicitly."
)

# The reference's most children of one fork.
MAX_FORKS = 100


def _config(body: NewSandbox, team_id: str) -> SandboxConfig:
    """The node's create for the team from a create body.

    Raises:
        RequestError: 400 for a filesystem-only auto-pause without autoPause or with autoResume.
    """
    if body.autoPauseMemory is False and not body.autoPause:
        raise RequestError(400, NEEDS_AUTO_PAUSE)
    if body.autoPauseMemory is False and body.autoResume and body.autoResume.enabled:
        raise RequestError(400, NO_AUTO_RESUME)
    # Kept under their wire names (shown by GET; SandboxConfig says which are enforced).
    kept = {"network", "allow_internet_access", "mcp", "volumeMounts", "autoResume",
            "autoPauseMemory"}  # fmt: skip
    options: dict[str, Any] = body.model_dump(include=kept, exclude_none=True)
    return SandboxConfig(body.templateID, body.timeout, body.secure, body.autoPause,
                         body.metadata or {}, body.envVars or {}, options, team_id)  # fmt: skip


async def _create(request: Request, model: type[NewSandbox]) -> Response:
    api = context(request)
    team_id = team_of(request)
    config = _config(await read_json(request, model, limit=CREATE_LIMIT), team_id)
    key = request.headers.get("idempotency-key")
    if key is None:
        return JSONResponse(responses.sandbox(await api.node.create(config), api.domain), 201)

    async def create() -> str:
        return (await api.node.create(config)).sandbox_id

    sandbox_id = await api.creates.run(team_id, key, create)
    sandbox = await api.node.get(sandbox_id)
    if sandbox is None:
        raise RequestError(409, f"the sandbox created with this Idempotency-Key "
                                f"({sandbox_id}) is gone")  # fmt: skip
    return JSONResponse(responses.sandbox(sandbox, api.domain), 201)


async def create(request: Request) -> Response:
    return await _create(request, NewSandbox)


async def create_v2(request: Request) -> Response:
    return await _create(request, NewSandboxV2)


async def get(request: Request) -> Response:
    sandbox = await owned_sandbox(request)  # one whose kill stopped halfway is still shown
    return JSONResponse(responses.detail(sandbox, context(request).domain))


async def kill(request: Request) -> Response:
    await context(request).node.kill(await owned_sandbox_id(request))
    return Response(status_code=204)


async def _connect(request: Request, timeout_s: int, memory: bool = True) -> Response:
    api = context(request)
    sandbox_id = await owned_sandbox_id(request)
    sandbox, resumed = await api.node.connect(sandbox_id, timeout_s, memory)
    return JSONResponse(responses.sandbox(sandbox, api.domain), 201 if resumed else 200)


# Each call below checks its body (400) before it looks for the sandbox (404), as before teams.


async def connect(request: Request) -> Response:
    params.sandbox_id(request)
    return await _connect(request, (await read_json(request, Timeout)).timeout)


async def connect_v2(request: Request) -> Response:
    params.sandbox_id(request)
    body = await read_json(request, ConnectV2, optional=True)
    return await _connect(request, body.timeout, body.memory)


async def resume(request: Request) -> Response:
    api = context(request)
    params.sandbox_id(request)
    body = await read_json(request, Resume, optional=True)
    sandbox = await api.node.resume(await owned_sandbox_id(request), body.timeout)
    return JSONResponse(responses.sandbox(sandbox, api.domain), 201)


async def pause(request: Request) -> Response:
    params.sandbox_id(request)
    body = await read_json(request, Pause, optional=True)
    await context(request).node.pause(await owned_sandbox_id(request), body.memory)
    return Response(status_code=204)


async def fork(request: Request) -> Response:
    api = context(request)
    params.sandbox_id(request)
    body = await read_json(request, Fork, optional=True)
    if body.count < 1:
        raise RequestError(400, "Count must be at least 1")
    if body.count > MAX_FORKS:
        raise RequestError(400, f"Count cannot be greater than {MAX_FORKS}")
    children = await api.node.fork(await owned_sandbox_id(request), body.timeout, body.count)
    return JSONResponse([responses.fork_result(c, api.domain) for c in children], 201)


async def set_timeout(request: Request) -> Response:
    params.sandbox_id(request)
    body = await read_json(request, Timeout)
    await context(request).node.set_timeout(await owned_sandbox_id(request), body.timeout)
    return Response(status_code=204)


async def set_network(request: Request) -> Response:
    params.sandbox_id(request)
    body = await read_json(request, NetworkUpdate)
    sandbox_id = await owned_sandbox_id(request)
    await context(request).node.update_network(sandbox_id, body.model_dump(exclude_none=True))
    return Response(status_code=204)


async def list_v2(request: Request) -> Response:
    api = context(request)
    query = listing.parse(request)
    team_id = team_of(request)
    template_ids = None
    if query.template is not None:
        template = api.store.template(query.template, team_id)
        # One the store does not hold is matched by id: a gateway's nodes hold templates of
        # their own (their base) that its database does not.
        template_ids = {template.template_id if template else query.template}
    found = [s for s in await _team_sandboxes(request) if listing.matches(s, query, template_ids)]
    items, token = listing.page(found, query)
    headers = {}
    if token is not None:
        headers["X-Next-Token"] = token
    if "running" in query.states:
        headers["X-Total-Running"] = str(sum(s.running for s in found))
    return JSONResponse([responses.listed(s) for s in items], headers=headers)


async def list_v1(request: Request) -> Response:
    wanted = params.metadata_filter(request)
    found = [s for s in await _team_sandboxes(request) if s.running
             and all(s.metadata.get(k) == v for k, v in wanted.items())]  # fmt: skip
    found.sort(key=lambda s: (-s.started_at, s.sandbox_id))
    return JSONResponse([responses.listed(s) for s in found])


async def _team_sandboxes(request: Request) -> list[SandboxInfo]:
    team_id = team_of(request)
    return [s for s in await context(request).node.list_sandboxes() if s.team_id == team_id]


def routes() -> list[Route]:
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
        Route("/sandboxes/{sandbox_id}/fork", fork, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/timeout", set_timeout, methods=["POST"]),
        Route("/sandboxes/{sandbox_id}/network", set_network, methods=["PUT"]),
    ]
