"""E2B control-API routes sandboxd does not serve, each answered 501 with E2B's error shape
and what it is, so that a client hears "not supported" and never reaches another route that
would take the path for one of its own (`DELETE /templates/tags`, the SDK's
`Template.remove_tags`, was once served as the deletion of a template called `tags`).
Registered ahead of the template routes by id, which take any path below /templates (and after
the served routes their patterns would shadow, `/templates/aliases/…`); each leaves this list
when sandboxd serves it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import Route

from sandboxd.api.errors import RequestError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.requests import Request
    from starlette.responses import Response

# (method, path, what it does in E2B's API)
UNSERVED = (
    ("GET", "/templates/{template_id}/builds/{build_id}/logs", "template build logs"),
    ("POST", "/templates/{template_id}/builds/{build_id}", "v1 template builds (the SDKs use v2)"),
)


def _refusal(what: str) -> Callable[[Request], Awaitable[Response]]:
    async def refuse(request: Request) -> Response:
        raise RequestError(
            501, f"{request.method} {request.url.path}: {what} is not supported by sandboxd"
        )

    return refuse


def routes() -> list[Route]:
    return [Route(path, _refusal(what), methods=[method]) for method, path, what in UNSERVED]
