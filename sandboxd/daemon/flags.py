"""The command line's options for running sandboxes, which `sandboxd serve` and `sandboxd node`
share (pool, limits, base template, cgroup parent, networking, sandbox domain, builds, volumes),
and the ServeOptions they make; --database-url, every command's that opens a store; and
--cluster-token-file, a node agent's and a gateway's."""

from __future__ import annotations

import argparse
import ipaddress
import os
from pathlib import Path
from typing import Any

from sandboxd.builds.builder import DEADLINE_OPTION, DEFAULT_DEADLINE_S
from sandboxd.builds.envd_layer import OPTION as ENVD_ARTIFACT_OPTION
from sandboxd.builds.systemd_init import PROVISIONS
from sandboxd.daemon.registry_options import add_registry_options, layer_registry
from sandboxd.daemon.serve import DATABASE_URL_ENV, ServeOptions
from sandboxd.errors import HostError, SandboxError
from sandboxd.host.disk import MIN_DISK_MB
from sandboxd.layers.quota import OPTION as STORAGE_OPTION
from sandboxd.network.slots import DEFAULT_NETWORK_POOL, NetworkPool, parse_pool
from sandboxd.templates.catalog import BASE_DISK_MB
from sandboxd.volumes.catalog import (
    DEFAULT_SIZE_MB as DEFAULT_VOLUME_MB,
    MAX_SIZE_MB as MAX_VOLUME_MB,
)
from sandboxd.volumes.storage import MIN_SIZE_MB as MIN_VOLUME_MB

DEFAULT_MAX_TIMEOUT_S = 24 * 3600
CLUSTER_TOKEN_ENV = "SANDBOXD_CLUSTER_TOKEN"  # noqa: S105  # the variable's name


def add_database_option(
    p: argparse.ArgumentParser, otherwise: str | None = None, inherited: bool = False
) -> None:
    """--database-url, by default $SANDBOXD_DATABASE_URL; `otherwise`: the store used without
    either (None: the cluster's shared database, which the command needs). `inherited`: a
    subcommand's, whose command has the option too: without the flag here, the command's value
    (argparse lets a subcommand's default replace it)."""
    what = "the cluster's shared" if otherwise is None else "the store in a"
    fallback = "" if otherwise is None else f", else {otherwise}"
    p.add_argument(
        "--database-url",
        default=argparse.SUPPRESS if inherited else os.environ.get(DATABASE_URL_ENV) or None,
        metavar="URL",
        help=f"{what} PostgreSQL database at this postgresql:// URL (needs sandboxd[postgres]; a "
        f"password is better given as PGPASSWORD than here) (default ${DATABASE_URL_ENV}"
        f"{fallback})",
    )


def add_cluster_token_option(p: argparse.ArgumentParser) -> None:
    """--cluster-token-file, read by `cluster_token`."""
    p.add_argument("--cluster-token-file", type=file_path, metavar="FILE",
                   help="the cluster's credential, the same on its node agents and gateways "
                   f"(default ${CLUSTER_TOKEN_ENV})")  # fmt: skip


def cluster_token(args: argparse.Namespace) -> str:
    """The token of --cluster-token-file, else $SANDBOXD_CLUSTER_TOKEN.

    Raises:
        HostError: neither gives one.
    """
    path: Path | None = args.cluster_token_file
    token = path.read_text().strip() if path is not None else os.environ.get(CLUSTER_TOKEN_ENV, "")
    if not token:
        raise HostError(
            f"the cluster token is needed: --cluster-token-file or ${CLUSTER_TOKEN_ENV}"
        )
    return token


def add_sandbox_options(p: argparse.ArgumentParser, cgroup_parent: str) -> None:
    """The options of running sandboxes; `cgroup_parent`: --cgroup-parent's default."""
    p.add_argument(
        "--pool",
        type=int,
        default=0,
        metavar="N",
        help="booted sandboxes kept waiting per template root filesystem (default 0)",
    )
    p.add_argument(
        "--max-timeout",
        type=int,
        default=DEFAULT_MAX_TIMEOUT_S,
        metavar="SECONDS",
        help=f"longest a sandbox may run from its (re)start (default {DEFAULT_MAX_TIMEOUT_S})",
    )
    p.add_argument(
        "--base-rootfs",
        type=Path,
        metavar="PATH",
        help="use this root filesystem as the base template instead of building one",
    )
    p.add_argument(
        "--disk-size-mb",
        type=disk_size,
        default=BASE_DISK_MB,
        metavar="MIB",
        help=f"the base template's disk: each sandbox's writable layer (default {BASE_DISK_MB}; "
        "0: no limit, a sandbox may fill the host's disk)",
    )
    p.add_argument(
        "--cgroup-parent",
        default=cgroup_parent,
        help=f"the cgroup the sandboxes' cgroups go under (default {cgroup_parent})",
    )
    p.add_argument(
        "--network-pool",
        type=pool,
        metavar="CIDR",
        help=f"each sandbox gets a /30 of this IPv4 pool and a way out, masqueraded (default "
        f"{DEFAULT_NETWORK_POOL})",
    )
    p.add_argument(
        "--dns",
        type=address,
        metavar="ADDRESS",
        help="where serve's DNS forwarder, which each sandbox's /etc/resolv.conf names (its "
        "gateway), sends their queries (default: the nameservers of serve's own /etc/resolv.conf)",
    )
    p.add_argument(
        "--no-network",
        action="store_true",
        help="sandboxes get only their loopback: no pool, forwarding, masquerade or DNS forwarder",
    )
    p.add_argument(
        "--domain",
        default="localhost",
        help="sandbox hosts are {port}-{sandboxID}.DOMAIN and the control API's api.DOMAIN "
        "(default localhost)",
    )
    p.add_argument(
        ENVD_ARTIFACT_OPTION,
        type=file_path,
        metavar="TARBALL",
        help="the self-contained envd (packaging/build-artifact) that templates built from images "
        "that are not sandboxd's run; without it such builds fail",
    )
    p.add_argument(
        DEADLINE_OPTION,
        type=int,
        default=DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help=f"a template build still running after this fails (default {DEFAULT_DEADLINE_S})",
    )
    p.add_argument(
        STORAGE_OPTION,
        type=int,
        metavar="MIB",
        help="the most build uploads and layers may take of the state disk together (default: "
        "half of its filesystem); an upload past it is refused, a build fails",
    )
    p.add_argument(
        "--volume-size-mb",
        type=int,
        default=DEFAULT_VOLUME_MB,
        metavar="MIB",
        help=f"the size of a new volume's filesystem (default {DEFAULT_VOLUME_MB})",
    )
    p.add_argument(
        "--volume-max-size-mb",
        type=int,
        default=MAX_VOLUME_MB,
        metavar="MIB",
        help=f"the largest volume a create's sizeMB may ask for (default {MAX_VOLUME_MB})",
    )
    p.add_argument(
        "--registry-mirror",
        metavar="HOST[:PORT]",
        help="pull Docker Hub's images from this registry instead",
    )
    add_registry_options(p)
    p.add_argument(
        "--provision",
        choices=PROVISIONS,
        default="auto",
        help="how templates built from images that are not sandboxd's boot: systemd (installed "
        "with the image's apt, as E2B does; a build that cannot fails), envd (envd as the "
        "container's program), auto (the default: systemd where the image can take it)",
    )


def serve_options(args: argparse.Namespace, **serving: Any) -> ServeOptions:
    """The options of `add_sandbox_options` in `args`, with `serving` (bind, port, TLS, the
    store) as the role gives them.

    Raises:
        SandboxError: options out of range or that do not go together.
    """
    if args.pool < 0 or args.max_timeout < 1 or args.build_timeout < 1:
        raise SandboxError("--pool must be 0 or more, --max-timeout and --build-timeout 1 or more")
    if args.build_storage_mb is not None and args.build_storage_mb < 1:
        raise SandboxError(f"{STORAGE_OPTION} must be 1 or more")
    if args.volume_size_mb < MIN_VOLUME_MB:
        raise SandboxError(f"--volume-size-mb must be {MIN_VOLUME_MB} or more")
    if args.no_network and (args.dns is not None or args.network_pool is not None):
        raise SandboxError("--no-network cannot be combined with --network-pool or --dns")
    network = None if args.no_network else NetworkPool(
        args.network_pool or DEFAULT_NETWORK_POOL, args.dns)  # fmt: skip
    return ServeOptions(state_dir=args.state_dir.absolute(), pool=args.pool,
                        max_timeout_s=args.max_timeout, base_rootfs=args.base_rootfs,
                        cgroup_parent=args.cgroup_parent, domain=args.domain,
                        disk_mb=args.disk_size_mb, network=network,
                        envd_artifact=args.envd_artifact, registry_mirror=args.registry_mirror,
                        build_deadline_s=args.build_timeout,
                        build_storage_mb=args.build_storage_mb, provision=args.provision,
                        volume_mb=args.volume_size_mb, volume_max_mb=args.volume_max_size_mb,
                        registry=layer_registry(args), **serving)  # fmt: skip


def disk_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (0 < value < MIN_DISK_MB):
        raise argparse.ArgumentTypeError(f"0 (no limit) or at least {MIN_DISK_MB}, not {text!r}")
    return value


def file_path(text: str) -> Path:
    path = Path(text).absolute()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no file at {text}")
    return path


def pool(text: str) -> ipaddress.IPv4Network:
    try:
        return parse_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
