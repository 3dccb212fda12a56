"""sandboxd's one listener: requests for a sandbox go to the proxy, the rest to the control API.

The control API app owns the lifespan (it starts and stops the sandbox manager); the proxy's
open connections are cut whenever the manager says a sandbox stopped serving, and all of them
when sandboxd shuts down.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sandboxd.proxy import SandboxProxy, is_sandbox_request

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send

    from sandboxd.runtime import Runtime
    from sandboxd.sandboxes import SandboxManager


class Dispatch:
    """ASGI app: `proxy` for sandbox traffic (control-api.md §1.4), `api` for everything else."""

    def __init__(self, api: Starlette, proxy: SandboxProxy, manager: SandboxManager) -> None:
        self.api = api
        self.proxy = proxy
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_sandbox_request(scope, self.proxy.domain, self.manager):
            await self.proxy(scope, receive, send)
        else:
            await self.api(scope, receive, send)


def create_dispatch(
    api: Starlette, manager: SandboxManager, runtime: Runtime, domain: str
) -> Dispatch:
    proxy = SandboxProxy(manager, runtime, domain)
    manager.on_gone(proxy.cut)
    inner = api.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with inner(app):
            try:
                yield
            finally:
                proxy.close()

    api.router.lifespan_context = lifespan
    return Dispatch(api, proxy, manager)
