"""The error vocabulary, mapped once at the boundary: EnvdHTTPError for plain HTTP routes
(JSON `{"code","message"}`), ConnectError for RPCs, and the interceptor that turns any
other exception from an RPC handler into a Connect error instead of a dropped connection."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
from typing import TYPE_CHECKING, Any, Final

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.responses import Response

from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from connectrpc.request import RequestContext

log = logging.getLogger("envd.errors")


class EnvdHTTPError(Exception):
    """An error answered on a plain HTTP route as `{"code": status, "message": message}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_error(status: int, message: str) -> Response:
    """The reference envd's JSON error body (code first, then message, then a newline)."""
    # Compact, as Go's json.Encoder writes it: clients compare these bodies byte for byte.
    payload = {"code": status, "message": valid_utf8(message)}
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n"
    return Response(
        body,
        status_code=status,
        headers={"X-Content-Type-Options": "nosniff"},
        media_type="application/json; charset=utf-8",
    )


def _as_connect_error(exc: Exception, ctx: RequestContext[Any, Any]) -> ConnectError:
    if isinstance(exc, ConnectError):
        return exc
    log.error("unexpected error in %s", ctx.method.name, exc_info=exc)
    return ConnectError(Code.INTERNAL, f"{ctx.method.name}: {type(exc).__name__}: {exc}")


class ErrorMappingInterceptor:
    """Last line of defence for RPCs: any non-Connect exception becomes INTERNAL.

    Without it connectrpc re-raises into uvicorn, which logs a traceback and closes the
    keep-alive connection, failing the client's next requests on it.
    """

    async def intercept_unary(
        self,
        call_next: Callable[[Any, RequestContext[Any, Any]], Awaitable[Any]],
        request: Any,
        ctx: RequestContext[Any, Any],
    ) -> Any:
        try:
            return await call_next(request, ctx)
        except Exception as exc:
            raise _as_connect_error(exc, ctx) from exc

    async def intercept_client_stream(
        self,
        call_next: Callable[[AsyncIterator[Any], RequestContext[Any, Any]], Awaitable[Any]],
        request: AsyncIterator[Any],
        ctx: RequestContext[Any, Any],
    ) -> Any:
        try:
            return await call_next(request, ctx)
        except Exception as exc:
            raise _as_connect_error(exc, ctx) from exc

    async def intercept_server_stream(
        self,
        call_next: Callable[[Any, RequestContext[Any, Any]], AsyncIterator[Any]],
        request: Any,
        ctx: RequestContext[Any, Any],
    ) -> AsyncIterator[Any]:
        inner = call_next(request, ctx)
        try:
            async for message in inner:
                yield message
        except Exception as exc:
            raise _as_connect_error(exc, ctx) from exc
        finally:
            # Run the handler's own cleanup now, not whenever the generator is collected.
            await inner.aclose()  # type: ignore[attr-defined]  # handlers are async generators


class InternalErrorMiddleware:
    """Outermost guard for plain HTTP routes: an unexpected exception is logged once and
    answered as JSON 500, and is not re-raised into the server (which would drop the
    keep-alive connection)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unexpected error in %s %s", scope["method"], scope["path"])
            if not started:
                await json_error(500, "internal error")(scope, receive, send)


# Errno → HTTP status for the /files routes. ENOSPC/EDQUOT are the reference envd's 507
# "insufficient storage"; ENAMETOOLONG and friends are the caller's bad path, not our fault.
_ERRNO_TO_STATUS: Final = {
    errno.ENOSPC: 507,
    errno.EDQUOT: 507,
    errno.ENOENT: 404,
    errno.ENAMETOOLONG: 400,
    errno.ENOTDIR: 400,
    errno.EISDIR: 400,
    errno.ELOOP: 400,
}


@contextlib.contextmanager
def http_os_errors(action: str, path: str, **overrides: int) -> Iterator[None]:
    """Turn an OSError raised in the block into an EnvdHTTPError "error <action> '<path>': …".

    `overrides` maps errno names (e.g. ENOENT=500) to the status this route uses.
    """
    try:
        yield
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        status = overrides.get(name) or _ERRNO_TO_STATUS.get(exc.errno or 0, 500)
        raise EnvdHTTPError(status, f"error {action} '{path}': {exc.strerror or exc}") from exc
