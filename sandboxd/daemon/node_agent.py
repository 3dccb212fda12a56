"""`sandboxd node`, a node agent of a cluster: serve's sandbox machinery (sandboxd.daemon.
machinery) over a local SQLite store of its own sandboxes, served not as E2B's API but as the
node-internal API (sandboxd.node.http_api) on `--listen` and the sandbox proxy, gated by the
cluster token (sandboxd.proxy.cluster_gate), on `--proxy-listen`; its heartbeat written to the
shared database (sandboxd.node.heartbeat). SIGTERM stops both ports and leaves the sandboxes
running for the next start to adopt, as serve does.

Two agents on one host share nothing that must be one's: uid ranges (and with them network
slots) are claimed host-wide (sandboxd.host.uid_ranges), loop devices are the kernel's to hand
out; the state directory, the cgroup parent and, networked, the network namespace's nftables
table are each held by a host-wide lock (sandboxd.host.locks), so a second agent given the same
one refuses to start."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette

from sandboxd.api import volume_content
from sandboxd.daemon.machinery import base_of, machinery
from sandboxd.daemon.serve import NotifyingServer, connection_policy, daemon_lifespan, open_store
from sandboxd.daemon.state_dir import open_private
from sandboxd.errors import HostError, SandboxError, StoreUnavailable
from sandboxd.host import locks
from sandboxd.network.slots import own_netns_inode
from sandboxd.node import wire
from sandboxd.node.builds import LocalBuilds
from sandboxd.node.catalog_record import NodeCatalog
from sandboxd.node.heartbeat import Advertised, Heartbeat, max_sandboxes
from sandboxd.node.http_api import node_app
from sandboxd.node.local import LocalNode, LocalVolumes, sandbox_info
from sandboxd.node.remote import KEEPALIVE_S
from sandboxd.proxy.cluster_gate import ClusterProxy
from sandboxd.proxy.listener import Listener
from sandboxd.store.node_store import NodeStore
from sandboxd.templates.catalog import register_base

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.types import ASGIApp, Lifespan

    from sandboxd.daemon.machinery import Machinery
    from sandboxd.daemon.serve import ServeOptions


@dataclass(frozen=True)
class NodeOptions:
    """`sandboxes`: serve's options of running sandboxes, its bind and port the internal API's
    (`--listen`), its store the local SQLite one."""

    sandboxes: ServeOptions
    node_id: str
    proxy_bind: str
    proxy_port: int
    advertise: str  # the address gateways dial
    database_url: str  # the shared PostgreSQL
    token: str
    heartbeat_s: float
    lease_s: int

    def advertised(self) -> Advertised:
        network = self.sandboxes.network
        return Advertised(self.node_id, f"http://{_host(self.advertise)}:{self.sandboxes.port}",
                          f"{_host(self.advertise)}:{self.proxy_port}", self.lease_s,
                          max_sandboxes(None if network is None else network.slots))  # fmt: skip


def run_node(options: NodeOptions) -> None:
    """Run until SIGTERM or SIGINT.

    Raises:
        SandboxError: not root, a host-wide claim taken, no usable base template. (The
            shared database is opened by the first heartbeat that can: not an error here.)
    """
    if os.geteuid() != 0:
        raise HostError("sandboxd node needs root (it boots containers)")
    sandboxes = options.sandboxes
    state_dir = sandboxes.state_dir.absolute()
    notify_socket = os.environ.pop("NOTIFY_SOCKET", None)
    open_private(state_dir)
    held = _claim_host(options)
    store = NodeStore(open_store(state_dir, None),
                      functools.partial(open_store, state_dir, options.database_url),
                      functools.partial(register_base, rootfs=base_of(state_dir, sandboxes.base_rootfs),
                                        disk_mb=sandboxes.disk_mb, root=state_dir))  # fmt: skip
    try:
        with contextlib.suppress(StoreUnavailable):  # else opened by the first heartbeat that can
            store.shared()
        parts = machinery(sandboxes, store.as_store(), state_dir, notify_socket, options.node_id)
        heartbeat = Heartbeat(
            store.shared, parts.manager, options.advertised(), options.heartbeat_s
        )
        proxy = ClusterProxy(parts.manager, sandboxes.domain, options.token)
        parts.manager.on_gone(proxy.cut)
        builds = LocalBuilds(parts.builder, parts.manager.templates)
        content = volume_content.routes(wire.CONTENT_PREFIX, volume_content.trusted(parts.volumes))
        catalog = NodeCatalog(store, options.node_id,
                              functools.partial(sandbox_info, parts.manager))  # fmt: skip
        app = node_app(LocalNode(parts.manager, catalog), builds, LocalVolumes(parts.volumes),
                       options.token, lambda: heartbeat.draining,
                       _node_lifespan(parts, proxy, heartbeat), content)  # fmt: skip
        api = NotifyingServer(_config(app, sandboxes.bind, sandboxes.port), notify_socket,
                      _serving_line(options))  # fmt: skip
        relay = uvicorn.Server(_config(_NOTHING, options.proxy_bind, options.proxy_port,
                                       http=Listener.serving(proxy, connection_policy())))  # fmt: skip
        with asyncio.Runner(loop_factory=api.config.get_loop_factory()) as runner:
            runner.run(_serve_both(api, relay))
    except OSError as exc:
        raise SandboxError(f"cannot serve: {exc}") from exc
    finally:
        store.close()
        for fd in held:
            os.close(fd)


def _claim_host(options: NodeOptions) -> list[int]:
    """The host-wide locks of what this agent must not share. Raises HostError: one is held."""
    sandboxes = options.sandboxes
    state = os.stat(sandboxes.state_dir)
    parent = sandboxes.cgroup_parent.replace("/", "%")
    held = [
        locks.hold(f"state-{state.st_dev}-{state.st_ino}", f"state directory {sandboxes.state_dir}")
    ]
    try:
        held.append(locks.hold(f"cgroup-{parent}", f"cgroup parent {sandboxes.cgroup_parent}"))
        if sandboxes.network is not None:
            held.append(locks.hold(f"netns-{own_netns_inode()}",
                                   "this network namespace's nftables table"))  # fmt: skip
    except HostError:
        for fd in held:
            os.close(fd)
        raise
    return held


async def _serve_both(api: uvicorn.Server, relay: uvicorn.Server) -> None:
    """The API server (with the lifespan) and the proxy's, until a signal stops both: the proxy
    server, whose signal handlers are installed last, stops first and hands the signal on."""
    relaying = asyncio.ensure_future(relay.serve())
    try:
        await api.serve()
    finally:
        relay.should_exit = True
        await relaying


def _node_lifespan(
    parts: Machinery, proxy: ClusterProxy, heartbeat: Heartbeat
) -> Lifespan[Starlette]:
    """serve's lifespan, and the heartbeat from before the ports listen until they close, the
    last one saying that the agent stops."""
    inner = daemon_lifespan(parts, proxy)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with inner(app):
            await heartbeat.beat()
            beating = asyncio.create_task(heartbeat.run())
            try:
                yield
            finally:
                beating.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beating
                await heartbeat.last_beat()  # nothing placed here while the agent is down

    return lifespan


def _config(
    app: ASGIApp, host: str, port: int, http: type[asyncio.Protocol] | None = None
) -> uvicorn.Config:
    """A port's configuration; with `http` (the proxy's listener) without a lifespan, which
    the API's server runs. The API keeps a gateway's idle connection open for longer than the
    gateway does (sandboxd.node.remote KEEPALIVE_S)."""
    config = uvicorn.Config(app, host=host, port=port, loop="uvloop", log_config=None,
                            access_log=False, timeout_graceful_shutdown=5, server_header=False,
                            http=http or "auto", lifespan="auto" if http is None else "off")  # fmt: skip
    if http is None:
        config.timeout_keep_alive = 2 * KEEPALIVE_S
    return config


# The proxy port's app: never reached (ClusterProxy answers every request itself).
_NOTHING = Starlette()


def _serving_line(options: NodeOptions) -> str:
    network = "off (--no-network)" if options.sandboxes.network is None else "on"
    return (
        f"node {options.node_id}: internal API on {options.sandboxes.bind}:"
        f"{options.sandboxes.port}, proxy on {options.proxy_bind}:{options.proxy_port}, "
        f"advertised as {options.advertise}, sandbox networking {network}"
    )


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
