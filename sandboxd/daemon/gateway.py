"""`sandboxd gateway`, the cluster's composition root: E2B's control API (sandboxd.api.app, as
serve has it) over the cluster's node service (sandboxd.cluster.nodes) and the sandbox proxy
relaying to the nodes' proxies (sandboxd.cluster.routes), on one port, with the reconciliation
loop (sandboxd.cluster.reconcile); volumes on their nodes (sandboxd.cluster.volumes). Stateless: everything it knows is in the shared PostgreSQL
database; any number of gateways serve the same cluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from sandboxd.api import volume_relay
from sandboxd.api.app import create_app
from sandboxd.api.context import ApiContext
from sandboxd.api.shared_creates import SharedCreates
from sandboxd.cluster.builds import ClusterBuilds
from sandboxd.cluster.keys import UPLOADS, VOLUME_TOKENS, derived_key
from sandboxd.cluster.nodes import CREATE_DEADLINE_S, ClusterNodes
from sandboxd.cluster.reconcile import Reconciler
from sandboxd.cluster.routes import ClusterRoutes
from sandboxd.cluster.volumes import ClusterVolumes
from sandboxd.daemon.flags import add_cluster_token_option, add_database_option, cluster_token
from sandboxd.daemon.serve import (
    DATABASE_URL_ENV,
    NotifyingServer,
    connection_policy,
    open_store,
    register_env_key,
)
from sandboxd.errors import HostError
from sandboxd.node.remote import RemoteNode
from sandboxd.proxy.listener import Listener
from sandboxd.proxy.relay import SandboxProxy
from sandboxd.templates.catalog import Templates
from sandboxd.volumes.tokens import VolumeTokens

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator

    from starlette.applications import Starlette

    from sandboxd.store.interface import Store
    from sandboxd.store.rows import NodeRow

DEFAULT_LISTEN = "127.0.0.1:3000"


@dataclass(frozen=True)
class GatewayOptions:
    database_url: str
    host: str
    port: int
    domain: str
    token: str


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "gateway",
        help="serve E2B's API for a cluster of node agents",
        description="Serve E2B's control API and the sandbox proxy for the node agents "
        "registered in a shared PostgreSQL database, placing sandboxes on them.",
    )
    add_database_option(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where the API and the proxy listen (default {DEFAULT_LISTEN})")  # fmt: skip
    p.add_argument("--domain", default="localhost", help="the sandboxes' domain: "
                   "{port}-{sandboxID}.DOMAIN (default localhost)")  # fmt: skip
    add_cluster_token_option(p)
    p.add_argument("--verbose", action="store_true", help="log debug messages too")


def options(args: argparse.Namespace) -> GatewayOptions:
    """Raises HostError: no database URL, no token, or a bad --listen."""
    if not args.database_url:
        raise HostError(f"sandboxd gateway needs --database-url (or ${DATABASE_URL_ENV})")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise HostError(f"--listen must be HOST:PORT, not {args.listen!r}")
    return GatewayOptions(args.database_url, host.strip("[]"), int(port), args.domain,
                          cluster_token(args))  # fmt: skip


def gateway(opts: GatewayOptions) -> None:
    """Run until SIGTERM or SIGINT.

    Raises:
        HostError: the URL is not PostgreSQL's; StoreUnavailable: the database is away.
    """
    if not opts.database_url.startswith(("postgresql://", "postgres://")):
        raise HostError("a gateway's --database-url must be a postgresql:// URL")
    store = open_store(Path(), opts.database_url)  # a PostgreSQL store: no state directory
    try:
        register_env_key(store)  # SANDBOXD_API_KEY, as serve takes it
        NotifyingServer(config(opts, store), os.environ.pop("NOTIFY_SOCKET", None),
                f"gateway listening on http://{opts.host}:{opts.port}, sandbox domain "
                f"{opts.domain}", "the sandboxes run on at their nodes").run()  # fmt: skip
    finally:
        store.close()


def config(opts: GatewayOptions, store: Store) -> uvicorn.Config:
    def dial(node: NodeRow) -> RemoteNode:
        return RemoteNode(node.node_id, node.api_url, opts.token)

    nodes = ClusterNodes(store, dial)
    routes = ClusterRoutes(store)
    proxy = SandboxProxy(routes, opts.domain, opts.token)
    nodes.on_gone(routes.forget)
    nodes.on_made(routes.learn)
    nodes.on_gone(proxy.cut)
    # No state directory: a gateway reads templates' records but boots none of their images.
    templates = Templates(store, lambda t: any(e.info.get("template_id") == t
                                               for e in store.catalog()), Path())  # fmt: skip
    builds = ClusterBuilds(nodes)
    # Keys the same on every gateway: an upload or a volume's token may reach another replica
    # than the one that signed it (behind one Service).
    uploads = derived_key(opts.token, UPLOADS)
    tokens = VolumeTokens(derived_key(opts.token, VOLUME_TOKENS))
    volumes = ClusterVolumes(store, nodes.client, tokens)
    context = ApiContext(nodes, store, templates, builds, opts.domain, uploads,
                         volumes, volume_relay.relayed(volumes),
                         SharedCreates(store, CREATE_DEADLINE_S))  # fmt: skip
    reconciler = Reconciler(nodes, builds)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        reconciler.start()
        refreshing = asyncio.create_task(nodes.rows.run())
        try:
            yield
        finally:
            refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refreshing
            await reconciler.stop()
            proxy.close()
            routes.close()
            await nodes.close()

    return uvicorn.Config(create_app(context, lifespan), host=opts.host, port=opts.port,
                          loop="uvloop", http=Listener.serving(proxy, connection_policy()),
                          log_config=None, access_log=False, timeout_graceful_shutdown=5,
                          server_header=False)  # fmt: skip
