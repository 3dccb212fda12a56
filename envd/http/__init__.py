"""The plain-HTTP half of envd: /health, /metrics, /envs, /init, /files, /files/compose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envd.http import compose, download, envs, health, init, metrics, upload

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

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
