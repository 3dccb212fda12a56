"""A build no node can take, all real processes (tests/cluster/rig.py with one node agent,
drained, and one gateway): it is requested (202, as E2B's), and ends in error naming why once a
create's deadline after its request has passed: the started one when its start gave up waiting
for a node, the one never started through the gateways' reconciliation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.builds import build_flow
from tests.cluster.rig import Cluster, running_cluster
from tests.cluster.test_moves import drain

if TYPE_CHECKING:
    from collections.abc import Iterator

# The build waits a create's deadline (60 s) for a node before it ends.
pytestmark = pytest.mark.timeout(600)
NO_NODE = "no live node can build"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), nodes=1, gateways=1) as running:
        yield running


def test_a_build_no_node_can_take_ends_in_error(cluster: Cluster) -> None:
    drain(cluster, cluster.nodes[0], draining=True)
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
