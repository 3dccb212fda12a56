"""Templates and snapshots everywhere in a cluster, all real processes (tests/cluster/rig.py:
PostgreSQL, docker-registry, two node agents started with `--registry`, two gateways): a
snapshot taken through one gateway (its node captures it, pushes its layers, records it in the
shared database) is listed through the other, only to its team; a create from it lands on every
node, the one that lacks its layers pulling them first, with the source's files; placement
prefers the node holding its layers; deleting it through a gateway removes it for every one, a
gateway that has just placed a create of it included."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.cluster.gateway import Gateway
    from tests.cluster.node_agent import NodeAgent

pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]
MARKER = "/home/user/marker"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("templates")) as running:
        yield running


def create(gateway: Gateway, template: str) -> dict[str, Any]:
    with gateway.client() as client:
        answer = client.post("/sandboxes", json={"templateID": template, "secure": True,
                                                 "timeout": 600})  # fmt: skip
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def node_of(cluster: Cluster, sandbox_id: str) -> NodeAgent:
    node_id = cluster.placed()[sandbox_id]
    return next(n for n in cluster.nodes if n.node_id == node_id)


def listed(gateway: Gateway, **headers: str) -> list[dict[str, Any]]:
    with gateway.client() as client:
        answer = client.get("/snapshots", headers=headers)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()
    return found


def held_by(cluster: Cluster, node: NodeAgent) -> list[str]:
    """The templates the node's last heartbeat says it holds the layers of."""
    rows = cluster.rows("SELECT status FROM nodes WHERE node_id = %s", node.node_id)
    return list(rows[0][0].get("templates", [])) if rows else []


def _holds(cluster: Cluster, node: NodeAgent, template_id: str) -> bool:
    return template_id in held_by(cluster, node)


def other_team_key(cluster: Cluster) -> str:
    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "sandboxd", *args, "--database-url",
                               cluster.url], check=False, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    cli("team", "create", "Other Team")
    return cli("api-key", "create", "--team", "Other Team")


def test_a_snapshot_made_on_one_node_is_listed_everywhere_and_created_on_every_node(
    cluster: Cluster,
) -> None:
    a, b = cluster.gateways
    source = create(a, "base")
    home = node_of(cluster, source["sandboxID"])
    home.sh(source["sandboxID"], f"echo made-on-{home.node_id} > {MARKER}",
            source["envdAccessToken"])  # fmt: skip
    with a.client() as client:
        taken = client.post(f"/sandboxes/{source['sandboxID']}/snapshots", json={"name": "shot"})
    assert taken.status_code == 201, taken.text
    snapshot_id = taken.json()["snapshotID"]
    assert snapshot_id == "shot:default"
    assert [s["snapshotID"] for s in listed(b)] == [snapshot_id]
    assert listed(b, **{"X-API-Key": other_team_key(cluster)}) == []  # another team's: none

    template_id = cluster.rows("SELECT template_id FROM templates WHERE alias = 'shot'")[0][0]
    wait_until(functools.partial(_holds, cluster, home, template_id), 60, "a heartbeat")
    others = [n for n in cluster.nodes if n is not home]
    assert all(template_id not in held_by(cluster, n) for n in others)
    near = create(b, snapshot_id)  # placement: the node holding its layers
    assert node_of(cluster, near["sandboxID"]) is home
    made = [near]
    for node in others:  # the others drained in turn: the snapshot's create lands on each
        # A drained node refuses a create that a gateway's rows (a second old at most) still
        # place there, and the create goes on.
        cluster.set_draining([n.node_id for n in others_than(cluster, node)], True)
        try:
            made.append(create(b, snapshot_id))
        finally:
            cluster.set_draining([n.node_id for n in cluster.nodes], False)
        assert node_of(cluster, made[-1]["sandboxID"]) is node
        wait_until(functools.partial(_holds, cluster, node, template_id), 60,
                   "the node to hold the layers it pulled")  # fmt: skip
    for sandbox in made:
        node = node_of(cluster, sandbox["sandboxID"])
        seen = node.sh(sandbox["sandboxID"], f"cat {MARKER}", sandbox["envdAccessToken"])
        assert seen == f"made-on-{home.node_id}\n"
    _kill(a, [source, *made])


def others_than(cluster: Cluster, node: NodeAgent) -> list[NodeAgent]:
    return [n for n in cluster.nodes if n is not node]


def test_a_snapshot_deleted_through_a_gateway_is_gone_for_every_one(cluster: Cluster) -> None:
    a, b = cluster.gateways
    source = create(a, "base")
    snapshot_id = snapshot(b, source)
    assert snapshot_id in [s["snapshotID"] for s in listed(a)]
    delete_template(b, snapshot_id)
    assert snapshot_id not in [s["snapshotID"] for s in listed(a)]
    assert create_status(a, snapshot_id) == 404
    _kill(a, [source])


def test_a_template_just_created_from_then_deleted_elsewhere_is_refused(cluster: Cluster) -> None:
    # Gateway a has just read the template for a create's placement when b deletes it.
    a, b = cluster.gateways
    source = create(a, "base")
    snapshot_id = snapshot(a, source)
    _kill(a, [create(a, snapshot_id), source])
    delete_template(b, snapshot_id)
    assert create_status(a, snapshot_id) == 404


def snapshot(gateway: Gateway, source: dict[str, Any]) -> str:
    with gateway.client() as client:
        taken = client.post(f"/sandboxes/{source['sandboxID']}/snapshots", json={})
    assert taken.status_code == 201, taken.text
    return str(taken.json()["snapshotID"])


def delete_template(gateway: Gateway, snapshot_id: str) -> None:
    with gateway.client() as client:
        assert client.delete(f"/templates/{snapshot_id.split(':')[0]}").status_code == 204


def create_status(gateway: Gateway, template: str) -> int:
    """The status of a create of `template` (which is expected to fail: nothing is killed)."""
    with gateway.client() as client:
        return client.post("/sandboxes", json={"templateID": template, "timeout": 60}).status_code


def _kill(gateway: Gateway, sandboxes: list[dict[str, Any]]) -> None:
    with gateway.client() as client:
        for sandbox in sandboxes:
            answer = client.delete(f"/sandboxes/{sandbox['sandboxID']}")
            assert answer.status_code == 204, answer.text


def test_no_shared_record_names_a_node_s_state_directory(cluster: Cluster) -> None:
    """Records name layers relative to the state directory (the base's, given outside it by
    `--base-rootfs`, as it is): no row names one node's own."""
    rows = cluster.rows("SELECT image::text FROM builds WHERE image IS NOT NULL")
    rows += cluster.rows("SELECT rootfs FROM templates WHERE rootfs <> ''")
    assert rows
    for node in cluster.nodes:
        assert all(str(node.state_dir) not in str(row[0]) for row in rows)
