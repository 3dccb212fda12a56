"""create_app(): the Starlette application with every route and both Connect services behind
the request gate (CORS, access token, Basic-auth user, in the reference envd's order)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, Response

from envd import http
from envd._gen.filesystem.filesystem_connect import Filesystem, FilesystemASGIApplication
from envd._gen.process.process_connect import Process, ProcessASGIApplication
from envd.errors import EnvdHTTPError, ErrorMappingInterceptor
from envd.filesystem.legacy import LegacySDKInterceptor
from envd.filesystem.listing_codecs import ListingGzip, listing_codecs
from envd.filesystem.service import FilesystemService
from envd.gate import RequestGate
from envd.grpc_refusal import GRPCRefusal
from envd.header_bytes import Utf8HeaderValues
from envd.http.body import MAX_MESSAGE_BYTES
from envd.http.endpoint import error_response
from envd.http.file_request import InvalidParameterError
from envd.process.codecs import output_codecs
from envd.process.registry import ProcessRegistry
from envd.process.service import ProcessService
from envd.users import UserCache

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

    from envd.settings import Settings
    from envd.state import SandboxState


async def _handler_error(_: Request, exc: Exception) -> Response:
    # Registered for these two only; endpoints answer them the same way themselves.
    return error_response(cast("EnvdHTTPError | InvalidParameterError", exc))


async def _router_error(_: Request, exc: Exception) -> Response:
    # The reference router's answers: plain-text 404, empty 405.
    error = cast("HTTPException", exc)  # registered for HTTPException only
    if error.status_code == 404:
        return PlainTextResponse("404 page not found\n", status_code=404)
    return Response(status_code=error.status_code, headers=error.headers)


def create_app(settings: Settings, state: SandboxState) -> Starlette:
    users = UserCache(state)
    filesystem = FilesystemService(state, users)
    processes = ProcessRegistry()
    process = ProcessService(processes, state, users)
    filesystem_rpc = GRPCRefusal(
        FilesystemASGIApplication(
            filesystem,
            interceptors=[
                ErrorMappingInterceptor(FilesystemService.ERROR_CODES),
                LegacySDKInterceptor(),
            ],
            codecs=listing_codecs(),
            compressions=[ListingGzip()],
            read_max_bytes=MAX_MESSAGE_BYTES,
        ),
        Filesystem.desc(),
    )
    process_rpc = GRPCRefusal(
        ProcessASGIApplication(
            process,
            interceptors=[ErrorMappingInterceptor(ProcessService.ERROR_CODES)],
            codecs=output_codecs(),
            read_max_bytes=MAX_MESSAGE_BYTES,
        ),
        Process.desc(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with processes.running():  # stops every child on the way out
            yield

    # The gate hands each RPC to its service by path prefix, and each endpoint its requests,
    # past the router.
    services = {rpc.path + "/": Utf8HeaderValues(rpc) for rpc in (filesystem_rpc, process_rpc)}
    routes = http.routes(settings, state, users)
    endpoints = http.direct_endpoints(routes)
    gate = Middleware(RequestGate, state=state, users=users, services=services, endpoints=endpoints)
    app = Starlette(
        routes=routes,
        middleware=[gate],
        exception_handlers={
            EnvdHTTPError: _handler_error,
            InvalidParameterError: _handler_error,
            HTTPException: _router_error,
        },
        lifespan=lifespan,
    )
    # The reference's router answers 404 for `/health/`; Starlette would redirect to `/health`.
    app.router.redirect_slashes = False
    # Awaited by the server when shutdown begins, before connections are drained, so open
    # streams can end cleanly instead of being cut (see server.py).
    app.state.shutdown_hooks = [
        filesystem.shutdown,
        processes.end_streams,
        processes.begin_stopping_children,
    ]
    return app


async def run_shutdown_hooks(app: Starlette) -> None:
    for hook in app.state.shutdown_hooks:
        await hook()
