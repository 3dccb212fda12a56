"""Gateways over node agents, all real processes: Debian's PostgreSQL of this module's own, two
`sandboxd node` agents (tests/cluster/node_agent.py) and two `sandboxd gateway`s, all on
loopback and stopped by pid. Creates through one gateway land on both nodes and their envd
answers through the other; kill and list hold across gateways; a create counts its template's
spawn once (the gateway's count, none on the node) and a fork none; one Idempotency-Key through two
gateways makes one sandbox; the database stopped answers 503 while cached routes (a create's
own among them) serve, then recovers; a gateway SIGKILLed mid-create leaves an orphan the reconciliation reaps; a node
SIGKILLed is listed lost and creates go to the other."""

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


def test_a_gateway_killed_mid_create_leaves_no_orphan(cluster: Cluster, tmp_path: Path) -> None:
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
        orphan = wait_until(booting, 120, "a sandbox to start booting on a node")
        doomed.kill()
    assert orphan not in cluster.placed()
    wait_until(lambda: any(orphan in cluster.on_node(n) for n in cluster.nodes)
               or not any(n.box_dir(orphan).exists() for n in cluster.nodes), 120,
               "the node to finish the orphan's create")  # fmt: skip
    wait_until(lambda: all(orphan not in cluster.on_node(n) for n in cluster.nodes), 300,
               "the reconciliation to reap the orphan")  # fmt: skip
    assert orphan not in cluster.placed()


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
