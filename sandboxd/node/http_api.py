"""The node-internal API of `sandboxd node`: one route per node service operation,
`POST /node/v1/{operation}` with a JSON object of its arguments, answered with the JSON of its
result (sandboxd.node.wire), for gateways only: every request must carry `Authorization: Bearer
<cluster token>` (401 otherwise). A domain error is answered {"code": its class name,
"message"} with a status saying what kind it is; a body that is not the operation's arguments
is a 400 BadRequest."""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.builds.uploads import declared_length
from sandboxd.errors import (
    NodeDraining,
    NotAllowed,
    NotFound,
    SandboxError,
    StoreUnavailable,
    WrongState,
)
from sandboxd.node import wire
from sandboxd.node.builds import UPLOAD_PREFIX, NodeBuilds
from sandboxd.node.service import NodeAgentService, NodeVolumes

if TYPE_CHECKING:
    import inspect
    from collections.abc import Awaitable, Callable, Sequence

    from starlette.requests import Request
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

    from sandboxd.node.builds import LocalBuilds

# What kind of failure each error is, as a status (the client goes by the code, not this).
_STATUSES: tuple[tuple[type[SandboxError], int], ...] = (
    (NotFound, 404),
    (NotAllowed, 400),
    (WrongState, 409),
    (NodeDraining, 503),
    (StoreUnavailable, 503),
)


def node_app(
    node: NodeAgentService,
    builds: LocalBuilds,
    volumes: NodeVolumes,
    token: str,
    draining: Callable[[], bool],
    lifespan: Lifespan[Starlette] | None = None,
    more: Sequence[BaseRoute] = (),
) -> ASGIApp:
    """The internal API over `node`, `builds` and `volumes`, a build's upload, and the routes
    `more` (the volumes' content API), behind the cluster token; creates refused with
    NodeDraining while `draining()`."""
    services = ((node, NodeAgentService), (builds, NodeBuilds), (volumes, NodeVolumes))
    routes: list[BaseRoute] = [
        _route(getattr(service, name), name, signature, draining)
        for service, protocol in services
        for name, signature in wire.operations(protocol).items()
    ]
    routes.append(Route(UPLOAD_PREFIX + "{template_id}/{files_hash}", _upload(builds),
                        methods=["PUT"]))  # fmt: skip
    return ClusterTokenGate(Starlette(routes=[*routes, *more], lifespan=lifespan), token)


class ClusterTokenGate:
    """ASGI: HTTP requests without `Authorization: Bearer <token>` answered 401 (compared in
    constant time); lifespan events pass."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = b"Bearer " + token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                message = "the node API needs the cluster token (Authorization: Bearer)"
                answer = JSONResponse({"code": "Unauthorized", "message": message}, 401)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _route(
    operation: Callable[..., Awaitable[object]],
    name: str,
    signature: inspect.Signature,
    draining: Callable[[], bool],
) -> Route:
    return Route(wire.PREFIX + name, _endpoint(operation, name, signature, draining),
                 methods=["POST"])  # fmt: skip


def _endpoint(
    operation: Callable[..., Awaitable[object]],
    name: str,
    signature: inspect.Signature,
    draining: Callable[[], bool],
) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> JSONResponse:
        try:
            arguments = _arguments(signature, await request.body())
        except (ValueError, TypeError) as exc:
            return JSONResponse({"code": "BadRequest", "message": f"{name}: {exc}"}, 400)
        try:
            if name == "create" and draining():
                raise NodeDraining("this node is draining: it takes no new sandboxes")
            result = await operation(**arguments)
        except SandboxError as exc:
            return _error(exc)
        return JSONResponse(wire.encode(result))

    return endpoint


def _upload(builds: LocalBuilds) -> Callable[[Request], Any]:
    """A build's upload, its body streamed to the builder as serve's upload route streams it
    (sandboxd.api.build_routes, bounded alike)."""

    async def endpoint(request: Request) -> Response:
        path = request.path_params
        length = declared_length(request.headers.get("content-length"))
        try:
            await builds.receive(path["template_id"], path["files_hash"], request.stream(),
                                 length)  # fmt: skip
        except SandboxError as exc:
            return _error(exc)
        except OSError as exc:  # the host's (a full disk): nothing of the upload is kept
            return _error(SandboxError(f"the upload could not be stored: {exc}"))
        return Response(status_code=204)

    return endpoint


def _error(exc: SandboxError) -> JSONResponse:
    status = next((s for kind, s in _STATUSES if isinstance(exc, kind)), 500)
    return JSONResponse(wire.encode_error(exc), status)


def _arguments(signature: inspect.Signature, body: bytes) -> dict[str, Any]:
    """The operation's arguments from a JSON object of them (a parameter with a default may be
    left out).

    Raises:
        ValueError: not JSON, a missing argument or one of the wrong shape (WireError).
        TypeError: not an object.
    """
    given = json.loads(body or b"{}")
    if not isinstance(given, dict):
        raise TypeError("the body must be a JSON object of the arguments")
    arguments = {}
    for parameter in signature.parameters.values():
        if parameter.name in given:
            arguments[parameter.name] = wire.decode(parameter.annotation, given[parameter.name])
        elif parameter.default is parameter.empty:
            raise ValueError(f"{parameter.name} is missing")
    return arguments
