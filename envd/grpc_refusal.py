"""gRPC requests are answered 415 before they reach connectrpc.

gRPC ends every response with HTTP trailers. envd serves HTTP/1.1 through uvicorn, which does
not offer ASGI's trailers extension, so connectrpc raises RuntimeError for any gRPC request:
the client got a 200 with `grpc-status: 2` and the log a traceback per request. A real gRPC
client needs HTTP/2 and never gets this far; whoever sends `application/grpc` over HTTP/1.1
gets what the Connect protocol gives an unsupported content type: 415 and the types that work
(`Accept-Post`). gRPC-Web carries its trailers in the body and works, so it is listed there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from connectrpc.server import ConnectASGIApplication
    from protobuf import DescService
    from starlette.types import Receive, Scope, Send

_GRPC: Final = "application/grpc"
_GRPC_WEB: Final = (
    "application/grpc-web",
    "application/grpc-web+json",
    "application/grpc-web+proto",
)
_UNARY_TYPES: Final = ", ".join(("application/json", "application/proto", *_GRPC_WEB))
_STREAM_TYPES: Final = ", ".join(
    ("application/connect+json", "application/connect+proto", *_GRPC_WEB)
)


def _is_grpc(content_type: bytes) -> bool:
    # The test connectrpc picks its gRPC protocol by: exact, or with a codec suffix.
    text = content_type.decode("latin-1")
    return text == _GRPC or text.startswith(_GRPC + "+")


class GRPCRefusal:
    """Wraps a Connect service's ASGI app; answers gRPC requests to its methods 415."""

    def __init__(self, app: ConnectASGIApplication[Any], service: DescService) -> None:
        self.app = app
        self.path = app.path
        self._accepted = {
            method.name: _UNARY_TYPES if method.method_kind == "unary" else _STREAM_TYPES
            for method in service.methods
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        accepted = self._accepted.get(scope["path"].rpartition("/")[2])
        if scope["type"] != "http" or accepted is None or not self._grpc(scope):
            await self.app(scope, receive, send)  # unknown methods get connectrpc's 404
            return
        headers = [(b"accept-post", accepted.encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 415, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    def _grpc(scope: Scope) -> bool:
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        return _is_grpc(content_type)
