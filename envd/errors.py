"""The error vocabulary, mapped once at the boundary.

* ErrnoAnswer: the one errno table, the Connect code an RPC answers and the HTTP status a
  /files route answers for each OS error.
* os_errors() (RPCs) and http_os_errors() (plain HTTP routes) apply it to an OSError raised
  in a block; http_status() where a route builds its own message.
* EnvdHTTPError: a plain HTTP route's error, answered as JSON `{"code","message"}` by the
  app's exception handler.
* ErrorMappingInterceptor: maps the domain exceptions a service lists (its ERROR_CODES) to
  their Connect code, and any other exception from an RPC handler to INTERNAL instead of a
  dropped connection.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.responses import Response

from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
    from types import TracebackType

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


class ErrorMappingInterceptor:
    """Turns the exceptions of an RPC handler into Connect errors, in one place.

    A domain exception listed in `codes` (by class or a base class) becomes that code, with its
    own message; any other non-Connect exception is logged and becomes INTERNAL. Without this
    connectrpc re-raises into uvicorn, which logs a traceback and closes the keep-alive
    connection, failing the client's next requests on it.
    """

    def __init__(self, codes: Mapping[type[Exception], Code]) -> None:
        self._codes = codes

    def _as_connect_error(self, exc: Exception, ctx: RequestContext[Any, Any]) -> ConnectError:
        if isinstance(exc, ConnectError):
            return exc
        for cls in type(exc).__mro__:
            code = self._codes.get(cls)
            if code is not None:
                return ConnectError(code, str(exc))
        log.error("unexpected error in %s", ctx.method.name, exc_info=exc)
        return ConnectError(Code.INTERNAL, f"{ctx.method.name}: {type(exc).__name__}: {exc}")

    async def intercept_unary(
        self,
        call_next: Callable[[Any, RequestContext[Any, Any]], Awaitable[Any]],
        request: Any,
        ctx: RequestContext[Any, Any],
    ) -> Any:
        try:
            return await call_next(request, ctx)
        except Exception as exc:
            raise self._as_connect_error(exc, ctx) from exc

    async def intercept_client_stream(
        self,
        call_next: Callable[[AsyncIterator[Any], RequestContext[Any, Any]], Awaitable[Any]],
        request: AsyncIterator[Any],
        ctx: RequestContext[Any, Any],
    ) -> Any:
        try:
            return await call_next(request, ctx)
        except Exception as exc:
            raise self._as_connect_error(exc, ctx) from exc

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
            raise self._as_connect_error(exc, ctx) from exc
        finally:
            # Run the handler's own cleanup now, not whenever the generator is collected.
            await inner.aclose()  # type: ignore[attr-defined]  # handlers are async generators


class ErrnoAnswer(Enum):
    """How an OSError is answered, by errno: (errno, Connect code, HTTP status).

    The Connect code is what the RPCs answer: the reference envd's, which says not_found for a
    missing path and internal for everything else. The HTTP status is what the /files routes
    answer. A call site that answers differently, as the reference does in places, says so
    with os_errors' overrides or http_status's `only`.
    """

    ENOENT = (errno.ENOENT, Code.NOT_FOUND, 404)
    """The path names nothing: the caller asked for something that is not there."""

    ENOSPC = (errno.ENOSPC, Code.INTERNAL, 507)
    """The disk is full: the reference's 507 Insufficient Storage on /files, internal on RPCs."""

    EDQUOT = (errno.EDQUOT, Code.INTERNAL, 507)
    """The user's quota is used up: a full disk as far as the caller can tell."""

    ENAMETOOLONG = (errno.ENAMETOOLONG, Code.INTERNAL, 400)
    """A name longer than the filesystem allows: the caller's path, not our failure."""

    ENOTDIR = (errno.ENOTDIR, Code.INTERNAL, 400)
    """The path goes through a file as if it were a directory: the caller's path is wrong."""

    EISDIR = (errno.EISDIR, Code.INTERNAL, 400)
    """A directory where a file is needed: the caller named the wrong kind of thing."""

    ELOOP = (errno.ELOOP, Code.INTERNAL, 400)
    """A symlink cycle (or a chain too long) in the path: it can never resolve."""

    OTHER = (0, Code.INTERNAL, 500)
    """Any other errno (EACCES, EIO, EMFILE, ...): the daemon could not do it."""

    @property
    def code(self) -> Code:
        return self.value[1]

    @property
    def status(self) -> int:
        return self.value[2]

    @staticmethod
    def of(exc: OSError) -> ErrnoAnswer:
        return _ANSWER_BY_ERRNO.get(exc.errno or 0, ErrnoAnswer.OTHER)


_ANSWER_BY_ERRNO: Final = {answer.value[0]: answer for answer in ErrnoAnswer}
_DISK_FULL: Final = frozenset({ErrnoAnswer.ENOSPC, ErrnoAnswer.EDQUOT})


def is_disk_full(exc: OSError) -> bool:
    """No space (or quota) left: the routes that write answer 507 with their own message."""
    return ErrnoAnswer.of(exc) in _DISK_FULL


def http_status(exc: OSError, *, only: Collection[ErrnoAnswer] | None = None) -> int:
    """The /files status for `exc`; with `only`, every other errno is 500 (routes that answer
    as the reference's 500 except for those)."""
    answer = ErrnoAnswer.of(exc)
    if only is not None and answer not in only:
        return 500
    return answer.status


@contextlib.contextmanager
def http_os_errors(action: str, path: str) -> Iterator[None]:
    """Turn an OSError raised in the block into an EnvdHTTPError "error <action> '<path>': …"
    with the table's status."""
    try:
        yield
    except OSError as exc:
        message = f"error {action} '{path}': {exc.strerror or exc}"
        raise EnvdHTTPError(http_status(exc), message) from exc


# An os_errors override: a str replaces the action, a Code the code, a (Code, message) pair
# replaces both with a whole message (the OSError is not shown).
Override = str | Code | tuple[Code, str]


class OSErrorMapping:
    """The context manager os_errors() returns; stateless, so one may be kept and reused."""

    __slots__ = ("_action", "_overrides")

    def __init__(self, action: str, overrides: Mapping[str, Override]) -> None:
        self._action = action
        self._overrides = {getattr(errno, name): value for name, value in overrides.items()}

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        _type: type[BaseException] | None,
        exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, OSError):
            raise self.connect_error(exc) from None

    def connect_error(self, exc: OSError) -> ConnectError:
        code, action = ErrnoAnswer.of(exc).code, self._action
        override = self._overrides.get(exc.errno)
        if isinstance(override, tuple):
            return ConnectError(*override)
        if isinstance(override, Code):
            code = override
        elif override is not None:
            action = override
        return ConnectError(code, f"{action}: {exc}")


def os_errors(action: str, **overrides: Override) -> OSErrorMapping:
    """Turn an OSError raised in the block into ConnectError(the table's code,
    "<action>: <error>"), unless `overrides` names its errno (ENOENT="file not found",
    ENOENT=Code.INTERNAL, or ELOOP=(Code.FAILED_PRECONDITION, "a whole message"))."""
    return OSErrorMapping(action, overrides)
