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
nothing."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sandboxd.cluster import placement
from sandboxd.errors import StoreUnavailable
from sandboxd.ids import now_us
from sandboxd.lifecycle.ingress import Ingress, Location

if TYPE_CHECKING:
    from sandboxd.lifecycle.ingress import Credentials
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import NodeRow

FRESH_S: Final = 5.0
STALE_LIMIT_S: Final = 60.0
NO_RULES: Final = Ingress()  # the node's proxy applies them


@dataclass(frozen=True)
class NodeProxyDialer:
    """Connections to a node's proxy port, whatever the sandbox's port (the request's Host or
    E2B's headers tell the node's proxy which)."""

    host: str
    port: int

    async def connect(self, port: int) -> socket.socket:  # the node's port
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    async def open_connection(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(sock=await self.connect(port))


def node_location(node_id: str, proxy_address: str) -> Location:
    host, _, port = proxy_address.rpartition(":")
    return Location(node_id, NodeProxyDialer(host.strip("[]"), int(port)))


class ClusterRoutes:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._routes: dict[str, tuple[float, Location | None]] = {}  # id → (read at, route)

    def forget(self, sandbox_id: str) -> None:
        self._routes.pop(sandbox_id, None)

    def learn(self, sandbox_id: str, node: NodeRow) -> None:
        """The sandbox runs on `node` as of now (its create was recorded there)."""
        self._routes[sandbox_id] = (
            time.monotonic(),
            node_location(node.node_id, node.proxy_address),
        )

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
        return node_location(node.node_id, node.proxy_address)

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
