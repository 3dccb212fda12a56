"""sandboxd's command line: `serve`, `node` (sandboxd.daemon.node_cli), `gateway`
(sandboxd.daemon.gateway), `api-key create`, `team create` and `ls`, `template build-base` and
`install-service`."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from envd.logs import setup_logging
from sandboxd import team_cli, template_cli
from sandboxd.builds.base_image import build_base
from sandboxd.daemon import gateway, node_cli, tls
from sandboxd.daemon.flags import (
    add_database_option,
    add_sandbox_options,
    file_path,
    serve_options,
)
from sandboxd.daemon.machinery import base_rootfs
from sandboxd.daemon.serve import (
    open_store,
    serve,
)
from sandboxd.daemon.state_dir import open_private
from sandboxd.daemon.systemd_unit import UNITS, install_service
from sandboxd.errors import SandboxError

DEFAULT_STATE_DIR = Path("/var/lib/sandboxd")
DEFAULT_PORT = 3000
# Loopback: the API boots containers as root, so reaching it from elsewhere is a choice to make.
DEFAULT_BIND = "127.0.0.1"


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
    add_database_option(p, otherwise="SQLite in the state directory")


def _verbose_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action="store_true", help="log debug messages too")


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
    add_sandbox_options(p, cgroup_parent="sandboxd")
    p.add_argument(
        "--tls-cert",
        type=file_path,
        metavar="PEM",
        help="serve HTTPS with this certificate chain (with --tls-key; `sandboxd tls init` "
        "makes one): E2B's domain mode, https://api.DOMAIN and https://{port}-{id}.DOMAIN",
    )
    p.add_argument("--tls-key", type=file_path, metavar="PEM", help="the certificate's private key")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandboxd", description="E2B-compatible sandbox host")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    common = argparse.ArgumentParser(add_help=False)
    _state_dir_option(common)
    _verbose_option(common)
    node_cli.add_parser(commands, common)
    gateway.add_parser(commands)
    team_cli.add_parsers(commands, _store_options)
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
        help="install a role's systemd unit (as root)",
        description="Write the role's unit (serve: sandboxd.service, node: sandboxd-node.service, "
        "gateway: sandboxd-gateway.service) into ROOT/etc/systemd/system, its ExecStart running "
        "this sandboxd with the unit's flags and those after --, e.g. `sandboxd install-service "
        "-- --port 3000 --pool 2` or `sandboxd install-service --role gateway -- --domain "
        "sandboxes.example.com`.",
    )
    p.add_argument("--role", choices=sorted(UNITS), default="serve", help="(default serve)")
    p.add_argument("--root", type=Path, default=Path("/"), help="root file system (default /)")
    p.add_argument("--enable", action="store_true", help="enable it (and start it if running)")
    p.add_argument("flags", nargs="*", metavar="FLAG", help="flags for the role's command")


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
            parser.parse_args([args.role, *args.flags])  # a typo fails here, not at start
            install_service(args.root.absolute(), args.role, args.flags, args.enable)
            return 0
        if args.command == "gateway":
            gateway.gateway(gateway.options(args))
            return 0
        state_dir: Path = args.state_dir.absolute()
        if args.command == "node":
            node_cli.run(args)
            return 0
        if args.command == "serve":
            if (args.tls_cert is None) != (args.tls_key is None):
                raise SandboxError("--tls-cert and --tls-key go together")
            serve(serve_options(args, bind=args.bind, port=args.port, tls_cert=args.tls_cert,
                                tls_key=args.tls_key, database_url=args.database_url))  # fmt: skip
        elif args.command == "tls":
            _tls_init(state_dir, args.domain)
        elif args.command in ("api-key", "team") or args.template_command in ("ls", "rm"):
            open_private(state_dir)
            store = open_store(state_dir, args.database_url)
            try:
                if args.command == "template":
                    template_cli.run(args, state_dir, store)
                else:
                    team_cli.run(args, store)
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
