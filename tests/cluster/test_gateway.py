"""Gateways over node agents, all real processes: Debian's PostgreSQL of this module's own, two
`sandboxd node` agents (tests/cluster/node_agent.py) and two `sandboxd gateway`s, all on
loopback and stopped by pid. Creates through one gateway land on both nodes and their envd
answers through the other; kill and list hold across gateways; a create counts its template's
spawn once (with its catalog row) and a fork none; one Idempotency-Key through two
gateways makes one sandbox; the database stopped answers 503 while cached routes (a create's
own among them) serve, then recovers; a gateway SIGKILLed mid-create leaves its sandbox in the
catalog, which its node wrote; a node writes no row for a gateway older than that, whose orphan
the reconciliation reaps; a node SIGKILLed is listed lost and creates go to the other."""

from __future__ import annotations

import functools
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sandboxd.cluster.catalog import LOST_KEY
from tests.cluster.gateway import DOMAIN, Gateway
from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.cluster.node_agent import NodeAgent

# The module's rig (a database server, two node agents, two gateways) starts in its first test's
# setup; the reaping of an orphan waits out a create's deadline (60 s) and a lease's takeover.
pytestmark = pytest.mark.timeout(900)
ENVD_PORT = 49983
NEW = {"templateID": "base", "timeout": 600}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def create(gateway: Gateway, **headers: str) -> dict[str, Any]:
    return create_as(gateway, NEW, headers)


def create_as(
    gateway: Gateway, new: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """A sandbox created through `gateway` with the body `new`."""
    with gateway.client() as client:
        answer = client.post("/sandboxes", json=new, headers=headers)
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def spread(cluster: Cluster, gateway: Gateway, count: int,
           new: dict[str, Any] = NEW) -> list[dict[str, Any]]:  # fmt: skip
    """`count` sandboxes (`new`, the create's body) created one after the other, each once its
    node has written a heartbeat since (which counts it, and which the next placement reads)."""
    made = []
    for _ in range(count):
        made.append(create_as(gateway, new))
        created_us = time.time_ns() // 1000
        node_id = cluster.placed()[made[-1]["sandboxID"]]
        wait_until(functools.partial(_beat_since, cluster, node_id, created_us), 60,
                   f"{node_id}'s heartbeat to count the new sandbox")  # fmt: skip
    return made


def kill(gateway: Gateway, sandboxes: list[dict[str, Any]]) -> None:
    with gateway.client() as client:
        for sandbox in sandboxes:
            assert client.delete(f"/sandboxes/{sandbox['sandboxID']}").status_code == 204


def envd_get(gateway: Gateway, sandbox: dict[str, Any], path: str,
             **extra: str) -> httpx.Response:  # fmt: skip
    host = f"{ENVD_PORT}-{sandbox['sandboxID']}.{DOMAIN}"
    headers = {"Host": host, "X-Access-Token": sandbox.get("envdAccessToken") or "", **extra}
    return httpx.get(gateway.url + path, headers=headers, timeout=60)


def test_creates_spread_over_the_nodes_and_serve_through_either_gateway(cluster: Cluster) -> None:
    a, b = cluster.gateways
    made = spread(cluster, a, 4)
    placed = cluster.placed()
    assert {placed[s["sandboxID"]] for s in made} == {"node-a", "node-b"}
    for sandbox in made:
        assert envd_get(b, sandbox, "/health").status_code == 204
        hostname = envd_get(b, sandbox, "/files?path=/etc/hostname&username=user")
        assert hostname.status_code == 200, hostname.text
        by_headers = httpx.get(b.url + "/health", timeout=60, headers={
            "E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": str(ENVD_PORT)})  # fmt: skip
        assert by_headers.status_code == 204
    # A client's own cluster token is not passed on: the node's proxy sees the gateway's.
    forged = envd_get(b, made[0], "/health", **{"X-Sandboxd-Cluster-Token": "forged"})
    assert forged.status_code == 204
    kill(b, made)


def test_kill_and_list_hold_across_gateways(cluster: Cluster) -> None:
    a, b = cluster.gateways
    kept, killed = create(a), create(a)
    with b.client() as client:
        listed = {s["sandboxID"] for s in client.get("/v2/sandboxes").json()}
        assert {kept["sandboxID"], killed["sandboxID"]} <= listed
        assert client.delete(f"/sandboxes/{killed['sandboxID']}").status_code == 204
    with a.client() as client:
        assert client.get(f"/sandboxes/{killed['sandboxID']}").status_code == 404
        assert client.get(f"/sandboxes/{kept['sandboxID']}").status_code == 200
        listed = {s["sandboxID"] for s in client.get("/v2/sandboxes").json()}
    assert killed["sandboxID"] not in listed
    assert kept["sandboxID"] in listed
    assert killed["sandboxID"] not in cluster.placed()
    assert envd_get(b, killed, "/health").status_code == 502
    assert all(killed["sandboxID"] not in cluster.on_node(n) for n in cluster.nodes)
    kill(a, [kept])


def spawns(gateway: Gateway, template_id: str) -> int:
    with gateway.client() as client:
        listed = {t["templateID"]: t for t in client.get("/templates").json()}
    return int(listed[template_id]["spawnCount"])


def test_a_create_counts_its_template_once_and_a_fork_none(cluster: Cluster) -> None:
    a, b = cluster.gateways
    parent = create(a)
    template_id = parent["templateID"]
    counted = spawns(b, template_id)  # the create's count is committed before its answer
    with a.client() as client:
        forked = client.post(f"/sandboxes/{parent['sandboxID']}/fork", json={"count": 1})
    assert forked.status_code == 201, forked.text
    child = forked.json()[0]["sandbox"]
    assert spawns(b, template_id) == counted
    again = create(b)
    assert spawns(a, template_id) == counted + 1
    kill(a, [parent, child, again])


def test_one_idempotency_key_through_two_gateways_makes_one_sandbox(cluster: Cluster) -> None:
    key = secrets.token_hex(8)
    before = set(cluster.placed())
    start = threading.Barrier(2)

    def create_at(gateway: Gateway) -> str:
        start.wait()
        return str(create(gateway, **{"Idempotency-Key": key})["sandboxID"])

    with ThreadPoolExecutor(2) as pool:
        ids = list(pool.map(create_at, cluster.gateways))
    assert ids[0] == ids[1]
    assert set(cluster.placed()) - before == {ids[0]}
    assert create(cluster.gateways[1], **{"Idempotency-Key": key})["sandboxID"] == ids[0]
    kill(cluster.gateways[0], [{"sandboxID": ids[0]}])


def test_the_database_stopped_is_a_503_while_cached_routes_serve(cluster: Cluster) -> None:
    a = cluster.gateways[0]
    sandbox = create(a)  # its route known from its create: its first request reads nothing
    cluster.db.halt()
    try:
        with a.client() as client:
            down = client.get("/v2/sandboxes")
        assert down.status_code == 503, down.text
        assert "database" in down.json()["message"]
        assert envd_get(a, sandbox, "/health").status_code == 204
    finally:
        cluster.db.launch()
    with a.client() as client:
        wait_until(lambda: client.get("/v2/sandboxes").status_code == 200, 120,
                   "the gateway to answer again")  # fmt: skip
    after = create(a)
    assert after["sandboxID"] in cluster.placed()
    kill(a, [sandbox, after])


def test_a_gateway_killed_mid_create_leaves_its_sandbox_recorded(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The node records what it makes (the gateway asks it to): the sandbox of a create whose
    gateway died is in the catalog, listed and killed through another gateway, not an orphan."""
    doomed = Gateway(tmp_path / "doomed", cluster.url, cluster.gateways[0].token)
    doomed.start()
    boxes = {n.node_id: set(_boxes(n)) for n in cluster.nodes}

    def booting() -> str | None:
        for node in cluster.nodes:
            new = set(_boxes(node)) - boxes[node.node_id]
            if new:
                return new.pop()
        return None

    with ThreadPoolExecutor(1) as background:
        background.submit(_create_quietly, doomed)
        made = wait_until(booting, 120, "a sandbox to start booting on a node")
        doomed.kill()
    home = wait_until(lambda: next((n for n in cluster.nodes if made in cluster.on_node(n)), None),
                      120, "the node to finish the create")  # fmt: skip
    assert cluster.placed()[made] == home.node_id
    with cluster.gateways[1].client() as client:
        assert made in {s["sandboxID"] for s in client.get("/v2/sandboxes").json()}
        assert client.delete(f"/sandboxes/{made}").status_code == 204
    assert made not in cluster.placed()


def test_a_node_records_a_create_only_when_its_gateway_asks(cluster: Cluster) -> None:
    """A gateway asks the node to write the catalog row (`catalog`); one older than that asks
    nothing and writes it itself: the node then writes none, and a sandbox no gateway recorded
    is an orphan the reconciliation reaps once a create's deadline has passed."""
    node, template_id = cluster.nodes[0], "base"
    counted = spawns(cluster.gateways[0], template_id)
    config = {"template": template_id, "timeout_s": 600, "secure": True, "auto_pause": False}
    asked = node.call_api("create", {"config": {**config, "catalog": True}})
    assert asked.status_code == 200, asked.text
    recorded = asked.json()
    assert recorded["cataloged"] is True
    assert cluster.placed()[recorded["sandbox_id"]] == node.node_id
    assert spawns(cluster.gateways[1], template_id) == counted + 1
    older = node.call_api("create", {"config": config})
    assert older.status_code == 200, older.text
    orphan = older.json()
    assert orphan["cataloged"] is False
    assert orphan["sandbox_id"] not in cluster.placed()
    assert spawns(cluster.gateways[1], template_id) == counted + 1
    wait_until(lambda: orphan["sandbox_id"] not in cluster.on_node(node), 300,
               "the reconciliation to reap the orphan")  # fmt: skip
    kill(cluster.gateways[0], [{"sandboxID": recorded["sandbox_id"]}])


def test_a_lost_node_is_listed_so_and_creates_go_elsewhere(cluster: Cluster) -> None:
    a, b = cluster.gateways
    lost_node = cluster.nodes[1]
    spread(cluster, a, 2)  # one more on each node
    on_lost = [s for s, n in cluster.placed().items() if n == lost_node.node_id]
    assert on_lost
    lost_node.kill()

    def listed_lost() -> bool:
        with b.client() as client:
            listed = {s["sandboxID"]: s for s in client.get("/v2/sandboxes").json()}
        return all(LOST_KEY in (listed.get(s, {}).get("metadata") or {}) for s in on_lost)

    wait_until(listed_lost, 120, "the lost node's sandboxes to be listed as lost")
    with a.client() as client:
        shown = client.get(f"/sandboxes/{on_lost[0]}")
        assert shown.status_code == 200, shown.text
        assert lost_node.node_id in shown.json()["metadata"][LOST_KEY]
        refused = client.post(f"/sandboxes/{on_lost[0]}/timeout", json={"timeout": 60})
        assert refused.status_code == 502
        assert lost_node.node_id in refused.json()["message"]
    for _ in range(2):
        made = create(a)["sandboxID"]
        assert cluster.placed()[made] == "node-a"


def _beat_since(cluster: Cluster, node_id: str, since_us: int) -> bool:
    return cluster.heartbeat_us(node_id) > since_us


def _boxes(node: NodeAgent) -> list[str]:
    sandboxes = node.state_dir / "sandboxes"
    return [p.name for p in sandboxes.iterdir()] if sandboxes.is_dir() else []


def _create_quietly(gateway: Gateway) -> None:
    try:
        with gateway.client() as client:
            client.post("/sandboxes", json=NEW)
    except httpx.TransportError:
        pass  # the gateway was killed: that is the point
