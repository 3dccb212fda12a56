"""The plain-HTTP half of envd: /health, /metrics, /envs, /init, /files, /files/compose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import Route

from envd.http import compose, download, envs, health, init, metrics, upload
from envd.http.endpoint import Endpoint

if TYPE_CHECKING:
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp

    from envd.settings import Settings
    from envd.state import SandboxState
    from envd.users import UserCache


def routes(settings: Settings, state: SandboxState, users: UserCache) -> list[BaseRoute]:
    # Starlette tries routes in order (no two share a path and method): the file transfers,
    # the busiest, first.
    return [
        *download.routes(state, users),
        *upload.routes(state, users),
        *health.routes(),
        *metrics.routes(),
        *envs.routes(state),
        *init.routes(settings, state),
        *compose.routes(state, users),
    ]


def direct_endpoints(routes: list[BaseRoute]) -> dict[tuple[str, str], ASGIApp]:
    """(method, path) -> app of every route that is an Endpoint, for the request gate to call
    directly. The router keeps them too, so that another method on their path still gets its
    405 (with Allow)."""
    return {
        (method, route.path): route.app
        for route in routes
        if isinstance(route, Route) and isinstance(route.app, Endpoint)
        for method in route.methods or ()
    }
