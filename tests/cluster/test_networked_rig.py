"""The networked rig (tests/cluster/netrig.py): two node agents, each in a network namespace of
its own inside the fake internet, networking their sandboxes, behind two gateways. Sandboxes
created through one gateway land on both nodes; each reaches the fake internet's HTTP server,
masqueraded by its own node, while E2B's egress rules apply (a denied address refused, the other
nodes' LAN always denied); each node's nftables table holds its own sandbox only; commands, envd
and a sandbox's own port answer through the other gateway. One paused to disk whose node is
SIGKILLed resumes on the other node, networked there with its rules; the node, back, drops its
copy's network. After the module nothing of the rig is left on the host: namespaces, cgroups,
processes."""

from __future__ import annotations

import errno
import functools
import json
import os
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sandboxd.cluster.catalog import LOST_KEY
from sandboxd.host.cgroups import CgroupHost
from sandboxd.runtime.spec import read_record
from tests.client import envelope, exit_and_stdout
from tests.cluster.gateway import DOMAIN
from tests.cluster.lan import LAN_GATEWAY, RigLan
from tests.cluster.netrig import NetNode, running_networked_cluster
from tests.cluster.test_gateway import NEW, envd_get, spread
from tests.network.fake_internet import NAMES, running_fake_internet
from tests.network.in_sandbox import script
from tests.network.isolation import NotIsolated
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.network.slots import NetSlot
    from tests.cluster.gateway import Gateway
    from tests.cluster.netrig import NetCluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
    pytest.mark.timeout(900),
]

EXAMPLE, OTHER = NAMES["example.test"], NAMES["other.test"]
CONNECT = script("connect")
REFUSED = str(errno.EHOSTUNREACH)  # the firewall's ICMP "administratively prohibited"
WEB_PORT = 8000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with running_fake_internet() as net:
        with running_networked_cluster(net, tmp_path_factory.mktemp("netrig")) as running:
            yield running
            namespaces = [m.ns for m in running.lan.nodes]
            cgroups = [n.cgroup_parent for n in running.nodes]
        assert [ns.name for ns in namespaces if ns.path.exists() or ns.pids_inside()] == []
        host = CgroupHost.detect()
        mounts = {host.unified, *host.v1.values()}
        assert [str(m / c) for m in mounts for c in cgroups if (m / c).exists()] == []


@pytest.fixture(scope="module")
def placed(cluster: NetCluster) -> Iterator[dict[str, dict[str, Any]]]:
    """node id → a sandbox created through the first gateway that landed there, with other.test
    denied (E2B's denyOut), killed after the module."""
    gateway = cluster.gateways[0]
    made: dict[str, dict[str, Any]] = {}
    new = {**NEW, "network": {"denyOut": [f"{OTHER}/32"]}}
    try:
        for sandbox in spread(cluster, gateway, 2, new):
            made.setdefault(cluster.placed()[sandbox["sandboxID"]], sandbox)
            if sandbox not in made.values():
                kill(gateway, sandbox)
        yield made
    finally:
        for sandbox in made.values():
            kill(gateway, sandbox)


def kill(gateway: Gateway, sandbox: dict[str, Any]) -> None:
    with gateway.client() as client:
        assert client.delete(f"/sandboxes/{sandbox['sandboxID']}").status_code in (204, 404)


def run(gateway: Gateway, sandbox: dict[str, Any], *argv: str) -> tuple[int, str]:
    """(exit code, stdout) of `argv` run by envd in the sandbox, through `gateway`."""
    headers = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": "49983",
               "X-Access-Token": sandbox.get("envdAccessToken") or "",
               "Content-Type": "application/connect+json"}  # fmt: skip
    body = envelope({"process": {"cmd": argv[0], "args": list(argv[1:])}})
    answer = httpx.post(gateway.url + "/process.Process/Start", content=body, headers=headers,
                        timeout=120)  # fmt: skip
    assert answer.status_code == 200, answer.text
    return exit_and_stdout(answer.content)


def node_of(cluster: NetCluster, node_id: str) -> NetNode:
    (node,) = [n for n in cluster.net_nodes if n.node_id == node_id]
    return node


def slot(node: NetNode, sandbox: dict[str, Any]) -> NetSlot:
    record = read_record(node.box_dir(sandbox["sandboxID"]))
    assert record is not None
    assert record.net is not None
    return record.net


def test_sandboxes_on_both_nodes_reach_the_fake_internet_from_their_own_node(
    cluster: NetCluster, placed: dict[str, dict[str, Any]]
) -> None:
    assert sorted(placed) == ["node-a", "node-b"]
    through = cluster.gateways[1]
    for node_id, sandbox in placed.items():
        node = node_of(cluster, node_id)
        code, out = run(through, sandbox, "curl", "-sS", "http://example.test/")
        assert code == 0, out
        echo = json.loads(out)
        assert echo["server"] == EXAMPLE
        assert echo["client"] == node.machine.address  # masqueraded by its own node
        assert run(through, sandbox, "python3", "-c", CONNECT, OTHER, "80") == (0, REFUSED + "\n")


def test_a_sandbox_reaches_no_node_and_no_gateway(
    cluster: NetCluster, placed: dict[str, dict[str, Any]]
) -> None:
    through = cluster.gateways[1]
    for sandbox in placed.values():
        for node in cluster.net_nodes:
            for port in (node.api_port, node.proxy_port):
                assert run(through, sandbox, "python3", "-c", CONNECT, node.machine.address,
                           str(port)) == (0, REFUSED + "\n"), f"{node.node_id}:{port}"  # fmt: skip
        for gateway in cluster.net_gateways:
            assert run(through, sandbox, "python3", "-c", CONNECT, LAN_GATEWAY,
                       str(gateway.port)) == (0, REFUSED + "\n")  # fmt: skip


def test_each_node_networks_its_own_sandbox_apart(
    cluster: NetCluster, placed: dict[str, dict[str, Any]]
) -> None:
    """Own pool, own slot (uid range), own nftables table in its own namespace."""
    slots = {n: slot(node_of(cluster, n), s) for n, s in placed.items()}
    assert len({s.index for s in slots.values()}) == len(slots)
    assert len({s.netns for s in slots.values()}) == len(slots)
    for node_id, own in slots.items():
        node = node_of(cluster, node_id)
        assert own.host_ip.startswith(node.machine.pool.split(".0.0/")[0] + ".")
        table = node.machine.ns.run(["nft", "list", "table", "inet", "sandboxd"],
                                    capture_output=True).stdout.decode()  # fmt: skip
        others = [s.ifname for n, s in slots.items() if n != node_id and s.ifname != own.ifname]
        assert own.ifname in table
        assert [name for name in others if f'"{name}"' in table] == []


def test_envd_and_a_sandbox_port_answer_through_either_gateway(
    cluster: NetCluster, placed: dict[str, dict[str, Any]]
) -> None:
    served = "nohup python3 -m http.server 8000 --directory /etc >/dev/null 2>&1 &"
    for sandbox in placed.values():
        assert run(cluster.gateways[0], sandbox, "/bin/sh", "-c", served)[0] == 0
        for gateway in cluster.gateways:
            assert envd_get(gateway, sandbox, "/health").status_code == 204
            host = f"{WEB_PORT}-{sandbox['sandboxID']}.{DOMAIN}"
            wait_until(functools.partial(_hostname, gateway, host), 60, f"{host} to serve")


def test_a_networked_sandbox_paused_to_disk_moves_with_its_rules(
    cluster: NetCluster, placed: dict[str, dict[str, Any]]
) -> None:
    """Its node SIGKILLed, it resumes on the other node, networked from that node's pool and
    address, its egress rules (other.test denied) with it; the killed node, back, drops its
    copy and its network. Last of the module: it stops a node."""
    a, b = cluster.gateways
    sandbox, home, other = placed["node-a"], node_of(cluster, "node-a"), node_of(cluster, "node-b")
    sid, before = sandbox["sandboxID"], slot(home, sandbox)
    assert run(a, sandbox, "/bin/sh", "-c", "echo kept > /home/user/marker")[0] == 0
    with a.client() as client:
        assert client.post(f"/sandboxes/{sid}/pause", json={"memory": False}).status_code == 204
    home.kill()  # SIGKILL: the node is gone, its lease runs out
    wait_until(lambda: lost(b, sid), 120, "node-a's lease to expire")
    with b.client() as client:
        resumed = client.post(f"/sandboxes/{sid}/connect", json={"timeout": 300})
    assert resumed.status_code == 201, resumed.text
    assert cluster.placed()[sid] == other.node_id
    moved = {**sandbox, "envdAccessToken": resumed.json().get("envdAccessToken")}
    assert run(b, moved, "cat", "/home/user/marker") == (0, "kept\n")
    code, out = run(b, moved, "curl", "-sS", "http://example.test/")
    assert code == 0, out
    assert json.loads(out)["client"] == other.machine.address  # masqueraded by its new node
    assert run(b, moved, "python3", "-c", CONNECT, OTHER, "80") == (0, REFUSED + "\n")
    assert slot(other, moved).host_ip.startswith(other.machine.pool.split(".0.0/")[0] + ".")

    home.start()  # back: the catalog is the truth
    wait_until(lambda: sid not in cluster.on_node(home), 300, "node-a's stale copy to be dropped")
    table = home.machine.ns.run(["nft", "list", "table", "inet", "sandboxd"],
                                capture_output=True).stdout.decode()  # fmt: skip
    assert before.ifname not in table
    with home.machine.ns.ipr() as ipr:
        assert ipr.link_lookup(ifname=before.ifname) == []
    assert run(a, moved, "cat", "/home/user/marker") == (0, "kept\n")


def lost(gateway: Gateway, sandbox_id: str) -> bool:
    with gateway.client() as client:
        shown: dict[str, Any] = client.get(f"/sandboxes/{sandbox_id}").json()
    return "stopped answering (lease expired at" in (shown.get("metadata") or {}).get(LOST_KEY, "")


def test_no_agent_starts_on_a_lan_holding_what_the_rig_did_not_make(tmp_path: Path) -> None:
    with running_fake_internet() as net:
        lan = RigLan(net, 1)
        try:
            lan.build()
            (machine,) = lan.nodes
            with machine.ns.ipr() as ipr:  # a way out the rig did not make
                ipr.link("add", ifname="stray0", kind="veth", peer="stray1")
            with pytest.raises(NotIsolated, match="link stray0"):
                lan.check_isolated()
            with pytest.raises(NotIsolated):
                NetNode(lan, machine, tmp_path / "state", "postgresql://unused", "token")
        finally:
            lan.remove()
        assert not machine.ns.path.exists()


def _hostname(gateway: Gateway, host: str) -> bool:
    answer = httpx.get(gateway.url + "/hostname", headers={"Host": host}, timeout=30)
    return answer.status_code == 200 and bool(answer.text.strip())
