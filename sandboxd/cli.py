"""sandboxd's command line: `serve`, `gateway`, `api-key create`, `template build-base` and
`install-service`."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sqlite3
import sys
import time
from pathlib import Path

from envd.logs import setup_logging
from sandboxd import template_cli
from sandboxd.builds.base_image import build_base
from sandboxd.builds.builder import DEADLINE_OPTION, DEFAULT_DEADLINE_S
from sandboxd.builds.envd_layer import OPTION as ENVD_ARTIFACT_OPTION
from sandboxd.builds.systemd_init import PROVISIONS
from sandboxd.daemon import gateway, tls
from sandboxd.daemon.serve import (
    DATABASE_URL_ENV,
    ServeOptions,
    base_rootfs,
    new_api_key,
    open_store,
    serve,
)
from sandboxd.daemon.state_dir import open_private
from sandboxd.daemon.systemd_unit import install_service
from sandboxd.errors import SandboxError
from sandboxd.host.disk import MIN_DISK_MB
from sandboxd.layers.quota import OPTION as STORAGE_OPTION
from sandboxd.network.slots import DEFAULT_NETWORK_POOL, NetworkPool, parse_pool
from sandboxd.templates.catalog import BASE_DISK_MB
from sandboxd.volumes.catalog import (
    DEFAULT_SIZE_MB as DEFAULT_VOLUME_MB,
    MAX_SIZE_MB as MAX_VOLUME_MB,
)
from sandboxd.volumes.storage import MIN_SIZE_MB as MIN_VOLUME_MB

DEFAULT_STATE_DIR = Path("/var/lib/sandboxd")
DEFAULT_PORT = 3000
# Loopback: the API boots containers as root, so reaching it from elsewhere is a choice to make.
DEFAULT_BIND = "127.0.0.1"
DEFAULT_MAX_TIMEOUT_S = 24 * 3600


def _state_dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"sandboxd's state directory (default {DEFAULT_STATE_DIR})",
    )


def _store_options(p: argparse.ArgumentParser) -> None:
    """--state-dir, and --database-url for the commands that use the store."""
    _state_dir_option(p)
    p.add_argument(
        "--database-url",
        default=os.environ.get(DATABASE_URL_ENV) or None,
        metavar="URL",
        help="the store in the PostgreSQL database at this postgresql:// URL (needs "
        "sandboxd[postgres]; a password is better given as PGPASSWORD than here) (default "
        f"${DATABASE_URL_ENV}, else SQLite in the state directory)",
    )


def _verbose_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action="store_true", help="log debug messages too")


def _disk_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (0 < value < MIN_DISK_MB):
        raise argparse.ArgumentTypeError(f"0 (no limit) or at least {MIN_DISK_MB}, not {text!r}")
    return value


def _file(text: str) -> Path:
    path = Path(text).absolute()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no file at {text}")
    return path


def _pool(text: str) -> ipaddress.IPv4Network:
    try:
        return parse_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "serve",
        help="serve the control API (as root)",
        description="Serve E2B's control API and run sandboxes. SIGTERM stops serving and "
        "leaves the sandboxes running: the next start adopts them.",
    )
    _store_options(p)
    _verbose_option(p)
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"(default {DEFAULT_PORT})")
    p.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        help=f"address to listen on (default {DEFAULT_BIND}: the API has root's power)",
    )
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
        type=_disk_size,
        default=BASE_DISK_MB,
        metavar="MIB",
        help=f"the base template's disk: each sandbox's writable layer (default {BASE_DISK_MB}; "
        "0: no limit, a sandbox may fill the host's disk)",
    )
    p.add_argument(
        "--cgroup-parent",
        default="sandboxd",
        help="the cgroup the sandboxes' cgroups go under (default sandboxd)",
    )
    p.add_argument(
        "--network-pool",
        type=_pool,
        metavar="CIDR",
        help=f"each sandbox gets a /30 of this IPv4 pool and a way out, masqueraded (default "
        f"{DEFAULT_NETWORK_POOL})",
    )
    p.add_argument(
        "--dns",
        type=_address,
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
        "--tls-cert",
        type=_file,
        metavar="PEM",
        help="serve HTTPS with this certificate chain (with --tls-key; `sandboxd tls init` "
        "makes one): E2B's domain mode, https://api.DOMAIN and https://{port}-{id}.DOMAIN",
    )
    p.add_argument("--tls-key", type=_file, metavar="PEM", help="the certificate's private key")
    p.add_argument(
        ENVD_ARTIFACT_OPTION,
        type=_file,
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
    p.add_argument(
        "--provision",
        choices=PROVISIONS,
        default="auto",
        help="how templates built from images that are not sandboxd's boot: systemd (installed "
        "with the image's apt, as E2B does; a build that cannot fails), envd (envd as the "
        "container's program), auto (the default: systemd where the image can take it)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandboxd", description="E2B-compatible sandbox host")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    gateway.add_parser(commands)
    api_key = commands.add_parser("api-key", help="manage API keys")
    key_commands = api_key.add_subparsers(dest="key_command", required=True)
    create = key_commands.add_parser(
        "create",
        help="print a new API key and store its hash",
        description="Print a new API key (e2b_ and 40 hex digits); only its hash is stored.",
    )
    _store_options(create)
    template = commands.add_parser("template", help="manage templates")
    template_commands = template.add_subparsers(dest="template_command", required=True)
    build = template_commands.add_parser(
        "build-base",
        help="build the base template (Debian bookworm, systemd, python, user, envd)",
        description="Build the base template's root filesystem with debootstrap and "
        "packaging/install.sh; the debootstrap stage is cached and reused while its recipe holds.",
    )
    _state_dir_option(build)
    _verbose_option(build)
    build.add_argument(
        "--stage-cache",
        type=Path,
        help="where the debootstrap stage is cached (default STATE_DIR/cache)",
    )
    build.add_argument(
        "--output",
        type=Path,
        help="build the root filesystem here instead of STATE_DIR/templates/base/rootfs",
    )
    build.add_argument("--commit", help="the build commit envd reports (default: git HEAD)")
    template_cli.add_parsers(template_commands, _store_options)
    _install_service_parser(commands)
    _tls_parser(commands)
    return p


def _tls_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tls = commands.add_parser("tls", help="certificates for serving HTTPS")
    tls_commands = tls.add_subparsers(dest="tls_command", required=True)
    init = tls_commands.add_parser(
        "init",
        help="make a CA of sandboxd's own and a certificate for api.DOMAIN and *.DOMAIN",
        description="Make STATE_DIR/tls/ca.pem (kept when present: clients keep trusting it) and "
        "cert.pem and key.pem for api.DOMAIN and *.DOMAIN, signed by it; print serve's flags.",
    )
    _state_dir_option(init)
    init.add_argument("--domain", required=True, help="serve's --domain (e.g. e2b.localhost)")


def _install_service_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "install-service",
        help="install the systemd unit sandboxd.service (as root)",
        description="Write sandboxd.service into ROOT/etc/systemd/system, its ExecStart running "
        "this sandboxd's serve with the flags after --, e.g. `sandboxd install-service -- "
        "--port 3000 --pool 2`.",
    )
    p.add_argument("--root", type=Path, default=Path("/"), help="root file system (default /)")
    p.add_argument("--enable", action="store_true", help="enable it (and start it if running)")
    p.add_argument("serve_flags", nargs="*", metavar="SERVE-FLAG", help="flags for serve")


def _create_key(state_dir: Path, database_url: str | None) -> None:
    store = open_store(state_dir, database_url)
    try:
        key = new_api_key()
        store.add_key(key, time.time_ns() // 1000)
    finally:
        store.close()
    sys.stdout.write(key + "\n")


def _tls_init(state_dir: Path, domain: str) -> None:
    files = tls.init(state_dir, domain)
    sys.stdout.write(
        f"CA (for clients to trust): {files.ca_cert}\n"
        f"serve flags: --domain {domain} --port 443 --tls-cert {files.cert} --tls-key {files.key}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    setup_logging(getattr(args, "verbose", False))
    try:
        if args.command == "install-service":
            parser.parse_args(["serve", *args.serve_flags])  # a typo fails here, not at start
            install_service(args.root.absolute(), args.serve_flags, args.enable)
            return 0
        if args.command == "gateway":
            gateway.gateway(gateway.options(args))
            return 0
        state_dir: Path = args.state_dir.absolute()
        if args.command == "serve":
            if args.pool < 0 or args.max_timeout < 1 or args.build_timeout < 1:
                raise SandboxError(
                    "--pool must be 0 or more, --max-timeout and --build-timeout 1 or more"
                )
            if args.build_storage_mb is not None and args.build_storage_mb < 1:
                raise SandboxError(f"{STORAGE_OPTION} must be 1 or more")
            if args.volume_size_mb < MIN_VOLUME_MB:
                raise SandboxError(f"--volume-size-mb must be {MIN_VOLUME_MB} or more")
            if args.no_network and (args.dns is not None or args.network_pool is not None):
                raise SandboxError("--no-network cannot be combined with --network-pool or --dns")
            if (args.tls_cert is None) != (args.tls_key is None):
                raise SandboxError("--tls-cert and --tls-key go together")
            network = None if args.no_network else NetworkPool(
                args.network_pool or DEFAULT_NETWORK_POOL, args.dns)  # fmt: skip
            serve(ServeOptions(state_dir, args.bind, args.port, args.pool, args.max_timeout,
                               args.base_rootfs, args.cgroup_parent, args.domain,
                               args.disk_size_mb, network, args.envd_artifact,
                               args.registry_mirror, tls_cert=args.tls_cert,
                               tls_key=args.tls_key, build_deadline_s=args.build_timeout,
                               build_storage_mb=args.build_storage_mb,
                               provision=args.provision, volume_mb=args.volume_size_mb,
                               volume_max_mb=args.volume_max_size_mb,
                               database_url=args.database_url))  # fmt: skip
        elif args.command == "api-key":
            open_private(state_dir)
            _create_key(state_dir, args.database_url)
        elif args.command == "tls":
            _tls_init(state_dir, args.domain)
        elif args.template_command in ("ls", "rm"):
            open_private(state_dir)
            store = open_store(state_dir, args.database_url)
            try:
                template_cli.run(args, state_dir, store)
            finally:
                store.close()
        else:
            build_base(
                (args.output or base_rootfs(state_dir)).absolute(),
                (args.stage_cache or state_dir / "cache").absolute(),
                args.commit,
            )
    except (SandboxError, sqlite3.Error, OSError) as exc:
        # argparse's convention for usage errors, and ours for everything the user must fix.
        parser.exit(2, f"sandboxd: {exc}\n")
    except KeyboardInterrupt:
        return 130
    return 0
