"""`sandboxd serve`, the composition root: the state directory's store, secret and base template,
the sandbox manager behind the node service, the builder, and uvicorn serving the control API
and the sandboxes' proxy, with the daemon's lifespan. SIGTERM stops serving and leaves the
sandboxes running; the next start adopts them. Under systemd (Type=notify) it sends READY=1 once it listens and
STOPPING=1 when it stops."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import re
import secrets
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import uvicorn

from envd.systemd import sd_notify
from sandboxd.api import volume_content
from sandboxd.api.app import create_app
from sandboxd.api.context import ApiContext
from sandboxd.builds.builder import DEFAULT_DEADLINE_S
from sandboxd.daemon.machinery import Machinery, machinery
from sandboxd.daemon.state_dir import open_private
from sandboxd.errors import HostError, SandboxError
from sandboxd.ids import now_us
from sandboxd.node.local import LocalNode
from sandboxd.proxy.connection_policy import ConnectionPolicy
from sandboxd.proxy.listener import Listener
from sandboxd.proxy.relay import SandboxProxy
from sandboxd.store.sqlite.store import SqliteStore
from sandboxd.templates.catalog import BASE_DISK_MB
from sandboxd.volumes.catalog import (
    DEFAULT_SIZE_MB as DEFAULT_VOLUME_MB,
    MAX_SIZE_MB as MAX_VOLUME_MB,
)

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterator
    from pathlib import Path

    from starlette.applications import Starlette
    from starlette.types import Lifespan

    from sandboxd.builds.systemd_init import Provision
    from sandboxd.images.layer_registry import LayerRegistry
    from sandboxd.network.slots import NetworkPool
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.daemon.serve")

API_KEY_ENV = "SANDBOXD_API_KEY"
DATABASE_URL_ENV = "SANDBOXD_DATABASE_URL"
API_KEY_FORM = re.compile(r"^e2b_[0-9a-f]{40}$")


@dataclass(frozen=True)
class ServeOptions:
    state_dir: Path
    bind: str
    port: int
    pool: int
    max_timeout_s: int
    base_rootfs: Path | None
    cgroup_parent: str
    domain: str
    disk_mb: int = BASE_DISK_MB
    network: NetworkPool | None = None  # None: sandboxes get only a loopback
    # What builds from images that are not ours put in their envd layer (sandboxd.builds:
    # `envd_artifact(options.envd_artifact)` says what is missing when it is None).
    envd_artifact: Path | None = None
    registry_mirror: str | None = None  # host[:port] to pull Docker Hub's images from
    tls_cert: Path | None = None  # with tls_key: HTTPS on the one port instead of HTTP
    tls_key: Path | None = None
    build_deadline_s: int = DEFAULT_DEADLINE_S
    build_storage_mb: int | None = None  # None: half the state directory's filesystem
    provision: Provision = "auto"  # how built images boot (sandboxd.builds.systemd_init)
    database_url: str | None = None  # a postgresql:// URL; None: SQLite in the state directory
    volume_mb: int = DEFAULT_VOLUME_MB  # a new volume's size
    volume_max_mb: int = MAX_VOLUME_MB  # the most a create may ask for
    # Where template, snapshot and pause layers are pushed and pulled (sandboxd.images.
    # layer_registry); None: every layer stays on this machine.
    registry: LayerRegistry | None = None


class NotifyingServer(uvicorn.Server):
    """uvicorn telling the service manager when sandboxd serves and when it stops."""

    def __init__(self, config: uvicorn.Config, notify_socket: str | None, serving: str,
                 stopping: str = "sandboxes keep running for the next start to adopt") -> None:  # fmt: skip
        super().__init__(config)
        self.notify_socket = notify_socket
        self.serving = serving  # what the one line logged once it listens says
        self.stopping = stopping  # and the one logged when it stops

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # the listener is bound: only now does the API answer
            status = f"serving on {self.config.host} port {self.config.port}"
            sd_notify(f"READY=1\nSTATUS={status}", self.notify_socket)
            log.info("%s", self.serving)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        sd_notify("STOPPING=1", self.notify_socket)
        log.info("stopping: %s", self.stopping)
        await super().shutdown(sockets)


def daemon_lifespan(parts: Machinery, proxy: SandboxProxy) -> Lifespan[Starlette]:
    """The daemon's start (before uvicorn listens) and stop (once it no longer does): the DNS
    forwarder, the manager (adoption, evictor, sampler, warm pool), the builder (failing the
    builds a previous sandboxd left running), and at the stop the proxy's connections cut and,
    last, the one client to envd closed. Sandboxes keep running; builds fail."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        manager, builder, dns = parts.manager, parts.builder, parts.dns
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(
                parts.envd.aclose
            )  # the manager's and the builder's: closed last
            if dns is not None:  # its sockets are bound already: queries wait in them
                await dns.start()
                stack.push_async_callback(dns.close)
            await manager.start()
            stack.push_async_callback(manager.stop)
            await builder.recover()
            stack.push_async_callback(builder.close)
            stack.callback(proxy.close)
            # What start-up made (modules, the app, adopted sandboxes) lives as long as the
            # process: out of the collector's reach, a full collection is no longer a
            # 20-30 ms pause of everything served (measured at the first request).
            gc.collect()
            gc.freeze()
            yield

    return lifespan


def daemon_config(options: ServeOptions, store: Store, parts: Machinery) -> uvicorn.Config:
    """uvicorn's configuration: the control API over the node service in this process, and the
    listener handing requests for sandboxes to their proxy, with the daemon's lifespan."""
    # One port for both (docs/sandboxd.md, "The proxy"): uvicorn serves the control API with
    # the proxy's protocol, which relays requests for a sandbox below ASGI; a sandbox's open
    # connections are cut once the manager says it stopped serving.
    manager = parts.manager
    proxy = SandboxProxy(manager, options.domain)
    manager.on_gone(proxy.cut)
    context = ApiContext(LocalNode(manager), store, manager.templates, parts.builder,
                         options.domain, manager.tokens.uploads_key(), parts.volumes,
                         volume_content.on_disk(parts.volumes))  # fmt: skip
    app = create_app(context, daemon_lifespan(parts, proxy))
    return uvicorn.Config(
        app,
        host=options.bind,
        port=options.port,
        loop="uvloop",
        http=Listener.serving(proxy, connection_policy()),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        server_header=False,
        ssl_certfile=options.tls_cert,
        ssl_keyfile=options.tls_key,
    )


def open_store(state_dir: Path, database_url: str | None) -> Store:
    """The store: SQLite in `state_dir`, or the PostgreSQL database at `database_url`, whose
    driver (the `sandboxd[postgres]` extra) is imported only then.

    Raises:
        HostError: the URL is not postgresql://, or psycopg is not installed.
        StoreUnavailable: the PostgreSQL server cannot be reached or refused the credentials.
        sqlite3.Error, psycopg.Error: the database is not one, or a migration failed.
    """
    if database_url is None:
        return SqliteStore(state_dir)
    scheme = urlsplit(database_url).scheme
    if scheme not in ("postgresql", "postgres"):
        raise HostError(f"--database-url must be a postgresql:// URL, not {scheme or '?'}://")
    try:
        from sandboxd.store.postgres.store import PostgresStore  # psycopg: an extra
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("psycopg"):
            raise
        raise HostError(
            "a PostgreSQL store needs psycopg: pip install 'sandboxd[postgres]'"
        ) from exc
    return PostgresStore(database_url)


def connection_policy() -> ConnectionPolicy:
    """The port's policy, volume uploads streamed: a file of any size takes as long as it
    takes, so long as it keeps coming."""
    policy = ConnectionPolicy.from_environment()
    return dataclasses.replace(policy, streamed_prefixes=(volume_content.PREFIX,))


def new_api_key() -> str:
    """`e2b_` + 40 hex (160 random bits), the SDK's and the reference's form."""
    return "e2b_" + secrets.token_hex(20)


def serving_line(options: ServeOptions) -> str:
    """What serve logs once it listens: where, the sandboxes' domain, and whether they are
    networked (serve networks them unless told --no-network, which an operator should see)."""
    host = f"[{options.bind}]" if ":" in options.bind else options.bind
    if options.network is None:
        networking = "off (--no-network: sandboxes reach only their own loopback)"
    else:
        networking = f"on (each sandbox a /30 of {options.network.cidr}, masqueraded)"
    scheme = "http" if options.tls_cert is None else "https"
    return (f"listening on {scheme}://{host}:{options.port}, sandbox domain {options.domain}, "
            f"sandbox networking {networking}")  # fmt: skip


def register_env_key(store: Store) -> None:
    """Raises HostError when SANDBOXD_API_KEY is set but not of the SDK's form."""
    key = os.environ.get(API_KEY_ENV)
    if key is None:
        return
    if not API_KEY_FORM.match(key):
        raise HostError(f"{API_KEY_ENV} must be e2b_ and 40 lower-case hex digits")
    store.add_key(key, now_us())


def check_tls(options: ServeOptions) -> None:
    """Raises HostError when the certificate and key do not load together (before the base
    template's build, not after it)."""
    if options.tls_cert is None or options.tls_key is None:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            options.tls_cert, options.tls_key
        )
    except ssl.SSLError as exc:
        raise HostError(f"--tls-cert/--tls-key: {exc}") from exc


def serve(options: ServeOptions) -> None:
    """Run until SIGTERM or SIGINT.

    Raises:
        SandboxError: not root, no usable base template, a bad SANDBOXD_API_KEY, or a TLS
            certificate and key that do not load.
    """
    if os.geteuid() != 0:
        raise HostError("sandboxd serve needs root (it boots containers)")
    state_dir = options.state_dir.absolute()
    # Only sandboxd notifies its service manager: nspawn, given the variable, would report each
    # container's start ("READY=1", "STATUS=Container running.") there too.
    notify_socket = os.environ.pop("NOTIFY_SOCKET", None)
    check_tls(options)
    open_private(state_dir)  # the options checked first: a typo touches nothing
    store = open_store(state_dir, options.database_url)
    try:
        register_env_key(store)
        parts = machinery(options, store, state_dir, notify_socket)
        config = daemon_config(options, store, parts)
        NotifyingServer(config, notify_socket, serving_line(options)).run()
    except OSError as exc:
        raise SandboxError(f"cannot serve: {exc}") from exc
    finally:
        store.close()
        if options.registry is not None:
            options.registry.close()
