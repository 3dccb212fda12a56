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
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandboxd.errors import (
    NodeDraining,
    NotAllowed,
    NotFound,
    SandboxError,
    StoreUnavailable,
    WrongState,
)
from sandboxd.node import wire
from sandboxd.node.service import NodeService, NodeVolumes

if TYPE_CHECKING:
    import inspect
    from collections.abc import Callable, Sequence

    from starlette.requests import Request
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

# What kind of failure each error is, as a status (the client goes by the code, not this).
_STATUSES: tuple[tuple[type[SandboxError], int], ...] = (
    (NotFound, 404),
    (NotAllowed, 400),
    (WrongState, 409),
    (NodeDraining, 503),
    (StoreUnavailable, 503),
)


def node_app(
    node: NodeService,
    volumes: NodeVolumes,
    token: str,
    draining: Callable[[], bool],
    lifespan: Lifespan[Starlette] | None = None,
    more: Sequence[BaseRoute] = (),
) -> ASGIApp:
    """The internal API over `node` and `volumes`, and the routes `more` (the volumes' content
    API), behind the cluster token; creates refused with NodeDraining while `draining()`."""
    routes = [
        Route(wire.PREFIX + name, _endpoint(service, name, signature, draining), methods=["POST"])
        for service, protocol in ((node, NodeService), (volumes, NodeVolumes))
        for name, signature in wire.operations(protocol).items()
    ]
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


def _endpoint(
    node: NodeService | NodeVolumes,
    name: str,
    signature: inspect.Signature,
    draining: Callable[[], bool],
) -> Callable[[Request], Any]:
    operation = getattr(node, name)

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
            status = next((s for kind, s in _STATUSES if isinstance(exc, kind)), 500)
            return JSONResponse(wire.encode_error(exc), status)
        return JSONResponse(wire.encode(result))

    return endpoint


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
