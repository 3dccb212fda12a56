"""The cluster rig networked: node agents (tests/cluster/node_agent.py) that network their
sandboxes, each in a network namespace of its own on the LAN of tests/cluster/lan.py inside the
fake internet (tests/network/fake_internet.py), with its own address, sandbox address pool,
nftables table (`inet sandboxd` of its namespace), state directory and cgroup parent; the uid
ranges (hence network slots) and loop devices are the host's, claimed apart as for any two
sandboxes. PostgreSQL is reached over its unix socket; the gateways and the layer registry run
in `uplink`, where the gateways dial the nodes' LAN addresses.

Ports cross namespaces only through relays (tests/cluster/relay.py, run in `uplink`): each
gateway's port is published on the host's loopback (where the tests and the SDK suites call
it), and the registries' ports on `uplink`'s loopback on each node's loopback, the only place a
node pulls plain HTTP from. Everything is stopped by pid and its namespace deleted by name,
however the block ends.

`python -m tests.cluster.netrig COMMAND...` runs COMMAND against the first gateway as
tests/cluster/rig.py does (scripts/test-cluster-net-sdk: the SDK suites)."""

from __future__ import annotations

import contextlib
import secrets
import socket
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.cluster import rig
from tests.cluster.gateway import DOMAIN, Gateway
from tests.cluster.lan import rig_lan
from tests.cluster.node_agent import NodeAgent
from tests.cluster.registry_server import registry_server, registry_url
from tests.network.fake_internet import DNS_ADDRESS, running_fake_internet
from tests.network.isolation import NotIsolated
from tests.network.namespaces import stop
from tests.sandboxd.serving import free_port, kill_sandboxes, release_volumes
from tests.sandboxd.template_cache import ensure_base_template
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

    import httpx

    from tests.cluster.lan import LanNode, RigLan
    from tests.images.registry import Registry
    from tests.network.fake_internet import FakeInternet
    from tests.network.namespaces import NetworkNamespace

REPO = Path(__file__).resolve().parents[2]


def inside(ns: NetworkNamespace) -> list[str]:
    """The prefix that runs a command in `ns` (its network only)."""
    return ["nsenter", f"--net={ns.path}", "--"]


def listening(port: int = 0) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` of the calling thread's namespace."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def start_relay(uplink: NetworkNamespace, listeners: dict[int, socket.socket],
                log: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    """A relay in `uplink` joining each listener (made in any namespace) to `uplink`'s
    127.0.0.1:PORT, PORT its key; the listeners are the relay's alone afterwards."""
    pairs = [f"{sock.fileno()}:{port}" for port, sock in listeners.items()]
    with open(log, "ab") as out:
        proc = uplink.popen([sys.executable, "-m", "tests.cluster.relay", *pairs], cwd=REPO,
                            pass_fds=[s.fileno() for s in listeners.values()],
                            stdout=out, stderr=out)  # fmt: skip
    for sock in listeners.values():
        sock.close()
    return proc


class NetNode(NodeAgent):
    """A node agent in its LAN namespace, networking its sandboxes from its own pool, both
    ports on its LAN address (which it advertises); its API called from `uplink`."""

    in_fake_internet = True

    def __init__(self, lan: RigLan, machine: LanNode, state_dir: Path, database_url: str,
                 token: str, *flags: str) -> None:  # fmt: skip
        """Raises NotIsolated unless `lan` was checked: no sandbox may reach a real network."""
        if not lan.checked:
            raise NotIsolated("a networked node agent runs only on a checked rig LAN")
        super().__init__(state_dir, ensure_base_template(), database_url,
                         f"node-{machine.letter}", "--network-pool", machine.pool, "--dns",
                         DNS_ADDRESS, *flags, token=token)  # fmt: skip
        self.machine = machine
        self.uplink = lan.net.uplink
        self.listen_host = self.advertise = machine.address
        self.url = f"http://{machine.address}:{self.api_port}"
        self.proxy_url = f"http://{machine.address}:{self.proxy_port}"
        self.command = [*inside(machine.ns), sys.executable, "-m", "sandboxd"]

    def call_api(
        self, operation: str, arguments: dict[str, object] | None = None, timeout: float = 120
    ) -> httpx.Response:
        call = super().call_api
        return self.uplink.call(lambda: call(operation, arguments, timeout))

    def clean_up(self) -> None:
        """Stop the agent, then kill its sandboxes from its namespace, where their networks
        are, and release its volumes."""
        try:
            self.stop()
        finally:
            try:
                self.machine.ns.call(kill_sandboxes, self.state_dir, self.cgroup_parent)
            finally:
                release_volumes(self.state_dir)


class NetGateway(Gateway):
    """A gateway in `uplink` on its loopback, published on the host's loopback (`url`) by a
    relay the rig starts with `listener`."""

    def __init__(self, name: Path, database_url: str, token: str,
                 uplink: NetworkNamespace) -> None:  # fmt: skip
        super().__init__(name, database_url, token)
        self.command = [*inside(uplink), sys.executable, "-m", "sandboxd"]
        self.port = free_port()  # in `uplink`, the same across restarts
        self.listener = listening()
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def argv(self) -> list[str]:
        return [*self.command, "gateway", "--database-url", self.database_url,
                "--listen", f"127.0.0.1:{self.port}", "--domain", DOMAIN]  # fmt: skip


class NetCluster(rig.Cluster):
    """The rig's pieces, the node agents and gateways also as what they are here."""

    def __init__(self, net: FakeInternet, lan: RigLan, nodes: list[NetNode],
                 gateways: list[NetGateway], **pieces: Any) -> None:  # fmt: skip
        super().__init__(nodes=list(nodes), gateways=list(gateways), **pieces)
        self.net, self.lan = net, lan
        self.net_nodes, self.net_gateways = nodes, gateways


@contextlib.contextmanager
def running_networked_cluster(net: FakeInternet, work: Path, nodes: int = 2, gateways: int = 2,
                              node_flags: tuple[str, ...] = (),
                              uplink_ports: tuple[int, ...] = ()) -> Iterator[NetCluster]:  # fmt: skip
    """The rig in `net`: `node_flags` added to every agent's command line, `uplink_ports`
    (e.g. an image registry's in `uplink`) relayed to every node as the layer registry is.

    Raises:
        NotIsolated: a namespace held something that was not made for the rig.
    """
    token = secrets.token_hex(16)
    with contextlib.ExitStack() as stack:  # undone last first, however the block ends
        lan = stack.enter_context(rig_lan(net, nodes))
        db = PostgresServer()
        stack.callback(db.stop)
        db.start()
        url = db.socket_url(db.create_database())
        layers = stack.enter_context(registry_server(prefix=tuple(inside(net.uplink))))
        ports = (_port(layers), *uplink_ports)
        for machine in lan.nodes:
            listeners = {port: machine.ns.call(listening, port) for port in ports}
            relay = start_relay(net.uplink, listeners, work / f"relay-{machine.letter}.log")
            stack.callback(stop, relay)
        agents = [NetNode(lan, machine, _made(work / f"node-{machine.letter}"), url, token,
                          "--domain", DOMAIN, "--registry", registry_url(layers, "cluster/layers"),
                          *node_flags) for machine in lan.nodes]  # fmt: skip
        fronts = [
            NetGateway(work / f"gateway-{i}", url, token, net.uplink) for i in range(gateways)
        ]
        relay = start_relay(net.uplink, {g.port: g.listener for g in fronts}, work / "relay.log")
        stack.callback(stop, relay)
        for piece in (*agents, *fronts):
            stack.callback(piece.clean_up if isinstance(piece, NetNode) else piece.stop)
            piece.start()
        yield NetCluster(net, lan, db=db, url=url, nodes=agents, gateways=fronts,
                         registry=registry_url(layers, "cluster/layers"))  # fmt: skip


def _port(registry: Registry) -> int:
    return int(registry.host.rsplit(":", 1)[1])


def _made(state_dir: Path) -> Path:
    state_dir.mkdir()
    return state_dir


def main(argv: list[str]) -> int:
    with (
        tempfile.TemporaryDirectory(prefix="sandboxd-netrig-") as work,
        running_fake_internet() as net,
        running_networked_cluster(net, Path(work)) as cluster,
    ):
        return rig.run_through(cluster, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
