"""The sandbox machinery every role that runs sandboxes shares (`sandboxd serve`, `sandboxd
node`): the state directory's base template and secret, the runtime with its networking (DNS
forwarder, domain proxy, nftables table), the lifecycle's manager, the builder and the volumes,
put together over one store. What each role serves on top of it is its own (sandboxd.daemon.serve,
sandboxd.daemon.node_agent)."""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envd.systemd import sd_notify
from sandboxd.builds.base_image import BUILD_FILE, build_base
from sandboxd.builds.builder import Builder, BuildLimits
from sandboxd.daemon.state_dir import SECRET_FILE, umask
from sandboxd.errors import StoreUnavailable
from sandboxd.guest.client import EnvdClient
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.images.shared_layers import SharedLayers
from sandboxd.layers.store import LayerStore
from sandboxd.lifecycle.manager import SandboxManager
from sandboxd.network import firewall
from sandboxd.network.dns_forwarder import DnsForwarder, host_nameservers
from sandboxd.network.egress_proxy.server import EgressProxy
from sandboxd.network.slots import enable_forwarding
from sandboxd.runtime.nspawn.container import SANDBOX_UMASK, require_rootfs
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import BootImage
from sandboxd.templates.catalog import register_base
from sandboxd.volumes.catalog import VolumeCatalog
from sandboxd.volumes.storage import VolumeStorage
from sandboxd.volumes.tokens import VolumeTokens

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.daemon.serve import ServeOptions
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.daemon.machinery")

# The priority sandboxd serves at. On a busy host most of a slow `/health` or proxied request
# was sandboxd's event loop waiting for a CPU, not working (its callbacks' run-queue wait was
# 88 % of their wall time while 20 sandboxes were created); envd inside runs at -20 for the same
# reason. Sandboxes start at the default 0 (sandboxd/runtime/nspawn/container.py), so this orders sandboxd's own
# work before theirs and does not lift them above the host's.
SERVE_NICE = -10


@dataclass(frozen=True)
class Machinery:
    """What runs sandboxes, ready for a server's lifespan (sandboxd.daemon.serve.daemon_lifespan)
    to start."""

    manager: SandboxManager
    builder: Builder
    dns: DnsForwarder | None  # None without a network pool
    envd: EnvdClient  # the manager's, the warm pool's and the builds' one way to envd
    volumes: VolumeCatalog


def machinery(
    options: ServeOptions, store: Store, state_dir: Path, notify_socket: str | None
) -> Machinery:
    """The base template registered (built first when missing), the networking installed and
    everything that runs sandboxes made over `store`.

    Raises:
        TemplateError: no usable base template. HostError: nft failed.
        OSError: the state directory or the host refused.
    """
    ensure_base(store, state_dir, options.base_rootfs, options.disk_mb, notify_socket)
    # This thread's priority, inherited by the threads it starts (the event loop runs here).
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SERVE_NICE)
    except PermissionError:  # root without CAP_SYS_NICE (some containers)
        log.warning("cannot raise sandboxd's priority: serving at the default one")
    egress = None
    dns = None
    if options.network is not None:
        enable_forwarding()
        egress = EgressProxy(options.network)
        upstream = options.network.dns
        dns = DnsForwarder(options.network.cidr,
                           [upstream] if upstream else host_nameservers())  # fmt: skip
        firewall.install(options.network.cidr, dns=dns.offered, proxy_port=egress.port)
    runtime = NspawnRuntime(state_dir / "sandboxes", cgroup_parent=options.cgroup_parent,
                            network=options.network, egress_proxy=egress,
                            probe=envd_ready, guest_unit=ENVD_UNIT)  # fmt: skip
    envd = EnvdClient()
    limits = build_limits(options, state_dir)
    layers = LayerStore(state_dir / "layers", limits.quota(state_dir))
    shared = SharedLayers(layers, options.registry)
    manager = SandboxManager(store, runtime, envd, server_secret(state_dir),
                             options.max_timeout_s, options.pool, layers, shared)  # fmt: skip
    builder = Builder(store, manager.templates, runtime, envd, state_dir,
                      envd_artifact=options.envd_artifact, mirror=options.registry_mirror,
                      limits=limits, provision=options.provision, shared=shared)  # fmt: skip
    volumes = VolumeCatalog(store, VolumeStorage(state_dir / "volumes"),
                            VolumeTokens(manager.tokens.volumes_key()),
                            options.volume_mb, options.volume_max_mb)  # fmt: skip
    volumes.start()
    manager.volumes.attach(volumes)  # mounts in sandboxes; a volume mounted is in use
    return Machinery(manager, builder, dns, envd, volumes)


def base_rootfs(state_dir: Path) -> Path:
    """Where the base template's root filesystem lives in a state directory."""
    return state_dir / "templates" / "base" / "rootfs"


def server_secret(state_dir: Path) -> bytes:
    """The key of the envd tokens' HMAC: made once, kept in the state directory (0600)."""
    path = state_dir / SECRET_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(32))
    finally:
        os.close(fd)
    return path.read_bytes()


def ensure_base(
    store: Store, state_dir: Path, given: Path | None, disk_mb: int, notify_socket: str | None
) -> None:
    """Register the base template with a disk of `disk_mb` (0: no limit); build its root
    filesystem first when it is missing. A node agent's shared database away: recorded once it
    answers (sandboxd.store.node_store).

    Raises:
        TemplateError: `given` is not a root filesystem, or the build failed.
    """
    rootfs = base_of(state_dir, given)
    if given is not None:
        require_rootfs(BootImage((rootfs,)))
    else:
        if not (rootfs / BUILD_FILE).is_file():
            log.info("the base template is missing: building it (a few minutes the first time)")
            sd_notify("STATUS=building the base template", notify_socket)
            with umask(SANDBOX_UMASK):  # a tree for sandboxes; still single-threaded here
                build_base(rootfs, state_dir / "cache")
    try:
        register_base(store, rootfs, disk_mb, state_dir)
    except StoreUnavailable as exc:
        log.warning("the base template is recorded once the shared database answers: %s", exc)


def base_of(state_dir: Path, given: Path | None) -> Path:
    """The base template's root filesystem: `--base-rootfs`, or the state directory's."""
    return base_rootfs(state_dir) if given is None else given.absolute()


def build_limits(options: ServeOptions, state_dir: Path) -> BuildLimits:
    """The builds' deadline, and their storage quota: by default half the state directory's
    filesystem, so that uploads and layers never take the room sandboxes and the store need."""
    if options.build_storage_mb is not None:
        storage = options.build_storage_mb << 20
    else:
        fs = os.statvfs(state_dir)
        storage = fs.f_blocks * fs.f_frsize // 2
    return BuildLimits(options.build_deadline_s, storage)
