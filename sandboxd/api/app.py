"""The control API's ASGI app: `X-API-Key` on every endpoint, every error as
`{"code","message"}`, the endpoints' collaborators given at construction (sandboxd.api.context),
and the daemon's lifespan given by whoever serves it (sandboxd/daemon/serve.py)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Route

from sandboxd.api import (
    logs,
    metrics,
    sandbox_routes,
    snapshot_routes,
    teams,
    template_routes,
    volume_content,
    volume_routes,
)
from sandboxd.api.errors import RequestError, error_response, status_of
from sandboxd.builds import upload_urls
from sandboxd.errors import SandboxError, StoreUnavailable

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp, Lifespan, Message, Receive, Scope, Send

    from sandboxd.api.context import ApiContext
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.api")

API_KEY = re.compile(r"^e2b_[0-9a-f]+$")
# E2B's spec asks no key for it: load balancers and probes call it.
HEALTH_PATH = "/health"
UPLOADS = upload_urls.PATH_PREFIX
# Without the key: the signed upload URLs, and the volume content its own tokens open.
KEYLESS = (UPLOADS, volume_content.PREFIX)


class ApiKeyMiddleware:
    """401 unless `X-API-Key` (any case) is a stored key of the SDK's form `e2b_` + hex, whose
    team it keeps in the request's state (sandboxd.api.teams.team_of)
    (`GET /health` aside, the signed upload URLs, which the SDKs use without the key, and the
    volume content, opened by its own bearer tokens); 503 while the store's database server
    cannot be reached."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path != HEALTH_PATH and not path.startswith(KEYLESS):
            key = Headers(scope=scope).get("x-api-key")
            if key is None:
                await error_response(401, "Missing API key (X-API-Key header)")(
                    scope, receive, send
                )
                return
            try:
                team_id = self.store.team_of_key(key) if API_KEY.match(key) else None
            except StoreUnavailable as exc:  # before the routes' handlers: answered here
                await error_response(503, str(exc))(scope, receive, send)
                return
            if team_id is None:
                await error_response(401, "Invalid API key")(scope, receive, send)
                return
            teams.keep_team(scope, team_id)
        await self.app(scope, receive, send)


async def _request_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)  # noqa: S101  # registered for RequestError only
    return error_response(exc.status, exc.message)


async def _domain_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, SandboxError)  # noqa: S101  # registered for SandboxError only
    status = status_of(exc)
    if status >= 500:
        log.warning("%s", exc)
    return error_response(status, str(exc))


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # noqa: S101  # registered for HTTPException only
    return error_response(exc.status_code, exc.detail)


class LastResortMiddleware:
    """A 500 with the JSON error for an exception no handler mapped, logged once. (Starlette's
    own error middleware re-raises after answering, and uvicorn then logged the same traceback
    a second time.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            log.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            if scope["type"] == "http" and not started:
                answer = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
                await answer(scope, receive, send)


async def _health(_: Request) -> Response:
    """204 while sandboxd serves."""
    return Response(status_code=204)


def create_app(context: ApiContext, lifespan: Lifespan[Starlette] | None = None) -> Starlette:
    """The control API over `context`'s node, store, templates and builder, with `lifespan`
    (the daemon's start and stop; None: nothing to start).

    The sandbox proxy is not part of it: mount or dispatch to it beside this app.
    """
    app = Starlette(
        routes=[
            Route(HEALTH_PATH, _health, methods=["GET"]),
            *sandbox_routes.routes(),
            *metrics.routes(),
            *teams.routes(),
            *logs.routes(),
            *snapshot_routes.routes(),
            *template_routes.routes(),
            *volume_routes.routes(),
            *volume_content.routes(),
        ],
        exception_handlers={
            RequestError: _request_error,
            SandboxError: _domain_error,
            HTTPException: _http_error,
        },
        lifespan=lifespan,
    )
    app.state.context = context
    app.add_middleware(ApiKeyMiddleware, store=context.store)
    app.add_middleware(LastResortMiddleware)  # the outermost of ours: it sees every failure
    return app
