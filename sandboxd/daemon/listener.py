"""sandboxd's one listener, put together: uvicorn serves the control API app, with
sandboxd/proxy/listener.py as its HTTP protocol so that requests for a sandbox go to the proxy
below ASGI (docs/sandboxd.md, "The proxy"). The proxy's open connections are cut whenever the
manager says a sandbox stopped serving, and all of them when the daemon's lifespan ends
(sandboxd/daemon/serve.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.proxy.connection_policy import ConnectionPolicy
from sandboxd.proxy.listener import Listener
from sandboxd.proxy.relay import SandboxProxy

if TYPE_CHECKING:
    from sandboxd.lifecycle.manager import SandboxManager


def create_proxy(manager: SandboxManager, domain: str) -> SandboxProxy:
    """The proxy to `manager`'s sandboxes under `domain`."""
    proxy = SandboxProxy(manager, domain)
    manager.on_gone(proxy.cut)
    return proxy


def create_listener(proxy: SandboxProxy) -> type[Listener]:
    """The protocol class for uvicorn's `http`, serving its app and the sandboxes' `proxy`."""
    return Listener.serving(proxy, ConnectionPolicy.from_environment())
