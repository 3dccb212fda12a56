"""`sandboxd node`: run a node agent (sandboxd.daemon.node_agent) with serve's sandbox options
and the cluster's (node id, ports, advertised address, shared database, cluster token,
heartbeat); `sandboxd node drain NODE_ID` and `undrain` set a node's drain flag in the shared
database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import functools
import socket
import struct
import sys
from urllib.parse import urlsplit

from sandboxd.daemon.flags import (
    add_cluster_token_option,
    add_database_option,
    add_sandbox_options,
    cluster_token,
    serve_options,
)
from sandboxd.daemon.node_agent import NodeOptions, run_node
from sandboxd.daemon.serve import DATABASE_URL_ENV, open_store
from sandboxd.errors import SandboxError
from sandboxd.node.heartbeat import DEFAULT_INTERVAL_S

SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address
DEFAULT_LISTEN = "0.0.0.0:49990"
DEFAULT_PROXY_LISTEN = "0.0.0.0:49991"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """`node` and its `drain`/`undrain`; `common`: the state directory and --verbose."""
    p = commands.add_parser("node", parents=[common], help="run a node agent of a cluster (as root)",
                            description="Run sandboxes for a cluster's gateways: the node-internal "
                            "API and proxy, both behind the cluster token, and a heartbeat in the "
                            "shared database. SIGTERM leaves the sandboxes running.")  # fmt: skip
    add_database_option(p)
    p.add_argument("--node-id", default=socket.gethostname(), help="(default: the host name)")
    p.add_argument("--listen", type=_host_port, default=DEFAULT_LISTEN,
                   help=f"the internal API's HOST:PORT (default {DEFAULT_LISTEN})")  # fmt: skip
    p.add_argument("--proxy-listen", type=_host_port, default=DEFAULT_PROXY_LISTEN,
                   help=f"the internal proxy's HOST:PORT (default {DEFAULT_PROXY_LISTEN})")  # fmt: skip
    p.add_argument("--advertise", metavar="HOST",
                   help="the address gateways dial (default: the first non-loopback one)")  # fmt: skip
    add_cluster_token_option(p)
    p.add_argument("--heartbeat-s", type=float, default=DEFAULT_INTERVAL_S,
                   help=f"(default {DEFAULT_INTERVAL_S:g})")  # fmt: skip
    p.add_argument("--lease-s", type=int, default=10, help="(default 10)")
    add_sandbox_options(p, cgroup_parent="sandboxd-node-NODE_ID")
    drains = p.add_subparsers(dest="node_command", metavar="drain|undrain")
    for name, says in (("drain", "place nothing new on"), ("undrain", "place sandboxes on")):
        d = drains.add_parser(
            name, help=f"{says} a node again" if name == "undrain" else f"{says} a node"
        )
        d.add_argument("target_node", metavar="NODE_ID")
        add_database_option(d, inherited=True)


def run(args: argparse.Namespace) -> None:
    """Raises SandboxError: bad options, no token, no such node to drain, or the agent's."""
    if args.database_url is None:
        raise SandboxError(f"--database-url (or ${DATABASE_URL_ENV}) is required")
    if args.node_command is not None:
        _set_draining(args, draining=args.node_command == "drain")
        return
    if urlsplit(args.database_url).scheme not in ("postgresql", "postgres"):
        raise SandboxError("--database-url must be the cluster's postgresql:// URL")
    if args.heartbeat_s <= 0 or args.lease_s <= args.heartbeat_s:
        raise SandboxError("--heartbeat-s must be above 0 and --lease-s above it")
    if args.cgroup_parent == "sandboxd-node-NODE_ID":
        args.cgroup_parent = f"sandboxd-node-{args.node_id}"
    (bind, port), (proxy_bind, proxy_port) = args.listen, args.proxy_listen
    run_node(NodeOptions(serve_options(args, bind=bind, port=port), args.node_id, proxy_bind,
                         proxy_port, args.advertise or first_address(), args.database_url,
                         cluster_token(args), args.heartbeat_s, args.lease_s))  # fmt: skip


def first_address() -> str:
    """The first IPv4 address of the host's interfaces that is not a loopback one (127.0.0.1
    when there is none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name[:15].encode())
            with contextlib.suppress(OSError):  # no IPv4 address on it
                address = socket.inet_ntoa(fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)[20:24])
                if not address.startswith("127."):
                    return address
    return "127.0.0.1"


def _set_draining(args: argparse.Namespace, draining: bool) -> None:
    store = open_store(args.state_dir.absolute(), args.database_url)
    found: list[bool] = []
    try:
        change = functools.partial(store.set_node_draining, args.target_node, draining)
        asyncio.run(store.write(lambda: found.append(change())))
    finally:
        store.close()
    if not found[0]:
        raise SandboxError(f"no node {args.target_node} in the shared database")
    sys.stdout.write(f"node {args.target_node}: {'draining' if draining else 'taking sandboxes'}\n")


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)
