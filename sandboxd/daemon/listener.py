"""sandboxd's one listener, put together: uvicorn serves the control API app, with
sandboxd/proxy/listener.py as its HTTP protocol so that requests for a sandbox go to the proxy
below ASGI (docs/sandboxd.md, "The proxy").

The control API app owns the lifespan (it starts and stops the sandbox manager); the proxy's
open connections are cut whenever the manager says a sandbox stopped serving, and all of them
when sandboxd shuts down.
"""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING

from sandboxd.proxy.connection_policy import ConnectionPolicy
from sandboxd.proxy.listener import Listener
from sandboxd.proxy.relay import SandboxProxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.applications import Starlette

    from sandboxd.lifecycle.manager import SandboxManager


def create_listener(api: Starlette, manager: SandboxManager, domain: str) -> type[Listener]:
    """The protocol class for uvicorn's `http`, serving `api` and the sandboxes' proxy."""
    proxy = SandboxProxy(manager, domain)
    manager.on_gone(proxy.cut)
    inner = api.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with inner(app):
            # What start-up made (modules, the app, adopted sandboxes) lives as long as the
            # process: out of the collector's reach, a full collection is no longer a
            # 20-30 ms pause of everything served (measured at the first request).
            gc.collect()
            gc.freeze()
            try:
                yield
            finally:
                proxy.close()

    api.router.lifespan_context = lifespan
    return Listener.serving(proxy, ConnectionPolicy.from_environment())
