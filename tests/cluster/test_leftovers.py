"""What the cluster ends by itself, all real processes (tests/cluster/rig.py with one node agent
and one gateway): a volume on the node that no gateway recorded (its create's gateway died
before the record: made here through the node's API) is deleted by the reconciliation once a
create's deadline has passed, and a recorded one stays; a lease that ran out (a move's whose
gateway died) is forgotten; a catalog row whose sandbox ended on its node (its timeout) is
dropped, the node's running one's kept; a build no node can take (the node
drained) is requested (202, as E2B's), and ends in error naming why once a create's deadline
after its request has passed: the started one when its start gave up waiting for a node, the
one never started through the reconciliation."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import psycopg
import pytest

from tests.builds import build_flow
from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

# The build waits a create's deadline (60 s) for a node before it ends, the orphan as long.
pytestmark = pytest.mark.timeout(600)
NO_NODE = "no live node can build"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), nodes=1, gateways=1) as running:
        yield running


def volumes_on(cluster: Cluster) -> set[str]:
    listed = cluster.nodes[0].call_api("list_volumes")
    assert listed.status_code == 200, listed.text
    return {v["volume_id"] for v in listed.json()}


def test_a_volume_no_gateway_recorded_is_deleted_from_its_node(cluster: Cluster) -> None:
    with cluster.gateways[0].client() as api:
        made = api.post("/volumes", json={"name": f"kept-{uuid.uuid4().hex[:8]}"})
    assert made.status_code == 201, made.text
    recorded = made.json()["volumeID"]
    orphan = cluster.nodes[0].call_api("create_volume", {
        "name": f"orphan-{uuid.uuid4().hex[:8]}", "size_mb": None,
        "team_id": "00000000-0000-4000-8000-000000000001"})  # fmt: skip
    assert orphan.status_code == 200, orphan.text
    orphan_id = orphan.json()["volume_id"]
    assert {recorded, orphan_id} <= volumes_on(cluster)
    wait_until(lambda: orphan_id not in volumes_on(cluster), 300,
               f"the reconciliation to delete volume {orphan_id}")  # fmt: skip
    assert recorded in volumes_on(cluster)
    assert cluster.rows("SELECT volume_id FROM volumes") == [(recorded,)]


def test_a_lease_that_ran_out_is_forgotten(cluster: Cluster) -> None:
    """A move's lease whose gateway died holding it (its row written here, expired)."""
    with psycopg.connect(cluster.url) as db:
        db.execute(b"INSERT INTO cluster_locks (name, holder, until_us) VALUES "
                   b"('move-gone', 'a dead gateway', 1)")  # fmt: skip
    wait_until(lambda: not cluster.rows("SELECT 1 FROM cluster_locks WHERE name = 'move-gone'"),
               120, "the reconciliation to forget the lease")  # fmt: skip
    assert [name for (name,) in cluster.rows("SELECT name FROM cluster_locks")] == ["reconcile"]


def test_the_catalog_row_of_a_sandbox_ended_on_its_node_is_dropped(cluster: Cluster) -> None:
    with cluster.gateways[0].client() as api:
        made = [api.post("/sandboxes", json={"templateID": "base", "timeout": t})
                for t in (3, 300)]  # fmt: skip
        assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
        ending, running = (m.json()["sandboxID"] for m in made)
        wait_until(lambda: ending not in cluster.placed(), 120,
                   "the reconciliation to drop the ended sandbox's row")  # fmt: skip
        assert running in cluster.placed()
        assert running in cluster.on_node(cluster.nodes[0])
        assert api.delete(f"/sandboxes/{running}").status_code == 204


def test_a_build_no_node_can_take_ends_in_error(cluster: Cluster) -> None:
    cluster.drain(cluster.nodes[0], draining=True)
    with cluster.gateways[0].client() as api:
        started = build_flow.request(api, "no-node-started")
        left = build_flow.request(api, "no-node-left")
        answer = build_flow.start(api, started, {"fromTemplate": "base", "steps": []})
        assert answer.status_code == 202, answer.text
        for build in (started, left):
            build_flow.poll(api, build, timeout_s=300)
            assert build.status["status"] == "error", build.status
            assert NO_NODE in build.status["reason"]["message"], build.status
    nodes = cluster.rows("SELECT node_id FROM builds WHERE build_id IN (%s, %s)",
                         started.build_id, left.build_id)  # fmt: skip
    assert nodes == [(None,), (None,)]
