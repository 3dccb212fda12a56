"""Where a gateway's proxy sends a sandbox's traffic (sandboxd.proxy.routing's SandboxLookup):
the node proxy of the node the catalog names, dialed over TCP; the node's proxy applies the
sandbox's own rules (traffic token, masked host) and wakes a paused sandbox with auto-resume, so
the gateway relays every request of a catalogued sandbox on a live node.

Routes are cached: a route read within FRESH_S is used as it is; after that the catalog is read
again, and while the database cannot be read a cached route keeps serving for STALE_LIMIT_S
since it was last read, then no longer (the sandbox's traffic answers 502). A kill or pause
through this gateway drops the route at once; one through another gateway meets the node's own
answer (the sandbox is not found there) until the route is read again. A create through this
gateway puts its sandbox's route in the cache (`learn`), so that its first request reads
nothing, and has a connection to its node's proxy dialed ahead (sandboxd.cluster.proxy_spares),
so that the first request does not wait for a connect either."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from sandboxd.cluster import placement
from sandboxd.cluster.proxy_spares import ProxySpares
from sandboxd.errors import StoreUnavailable
from sandboxd.ids import now_us
from sandboxd.lifecycle.ingress import Ingress, Location

if TYPE_CHECKING:
    import socket

    from sandboxd.lifecycle.ingress import Credentials
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import NodeRow

FRESH_S: Final = 5.0
STALE_LIMIT_S: Final = 60.0
NO_RULES: Final = Ingress()  # the node's proxy applies them


@dataclass(frozen=True)
class NodeProxyDialer:
    """Connections to a node's proxy port, whatever the sandbox's port (the request's Host or
    E2B's headers tell the node's proxy which), a spare one first."""

    host: str
    port: int
    spares: ProxySpares = field(compare=False, repr=False)

    async def connect(self, port: int) -> socket.socket:  # the node's port
        return await self.spares.connect(self.host, self.port)

    async def open_connection(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(sock=await self.connect(port))

    def prepare(self) -> None:
        """A spare connection dialed now, for the next connect."""
        self.spares.prepare(self.host, self.port)


def node_dialer(proxy_address: str, spares: ProxySpares) -> NodeProxyDialer:
    host, _, port = proxy_address.rpartition(":")
    return NodeProxyDialer(host.strip("[]"), int(port), spares)


class ClusterRoutes:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._routes: dict[str, tuple[float, Location | None]] = {}  # id → (read at, route)
        self.spares = ProxySpares()

    def close(self) -> None:
        self.spares.close()

    def forget(self, sandbox_id: str) -> None:
        self._routes.pop(sandbox_id, None)

    def learn(self, sandbox_id: str, node: NodeRow) -> None:
        """The sandbox runs on `node` as of now (its create was recorded there): a spare
        connection to its node's proxy is dialed for its first request."""
        dialer = node_dialer(node.proxy_address, self.spares)
        dialer.prepare()
        self._routes[sandbox_id] = (time.monotonic(), Location(node.node_id, dialer))

    def locate(self, sandbox_id: str) -> Location | None:
        cached = self._routes.get(sandbox_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < FRESH_S:
            return cached[1]
        try:
            route = self._read(sandbox_id)
        except StoreUnavailable:
            if cached is not None and now - cached[0] < STALE_LIMIT_S:
                return cached[1]
            return None
        self._routes[sandbox_id] = (now, route)
        return route

    def _read(self, sandbox_id: str) -> Location | None:
        """The route the catalog gives; None when unknown or on a node whose lease expired."""
        entry = self.store.catalog_entry(sandbox_id)
        if entry is None:
            return None
        node = self.store.node(entry.node_id)
        if node is None or not placement.alive(node, now_us()):
            return None
        return Location(node.node_id, node_dialer(node.proxy_address, self.spares))

    async def wake(self, sandbox_id: str, port: int, credentials: Credentials) -> Location | None:
        # Paused sandboxes are located like running ones (their node's proxy wakes them): a
        # request lands here only for a sandbox no live node holds.
        return None

    def ingress(self, sandbox_id: str) -> Ingress:  # the node applies it
        return NO_RULES

    def sandbox_for_signature(self, path: str, operation: str, username: str, signature: str,
                              expiration: str | None) -> str | None:  # fmt: skip
        # Needs every sandbox's envd token: a gateway keeps none (the Host or headers route).
        return None
