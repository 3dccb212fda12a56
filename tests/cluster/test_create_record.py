"""A create's catalog row, written by its node alongside envd's `/init` (sandboxd.node.
catalog_record), all real processes (tests/cluster/rig.py with one node agent, its pool of one,
and one gateway): a create whose `/init` is refused answers so, and leaves neither its row nor
its spawn's count behind; the next create is recorded and counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.cluster.rig import Cluster, running_cluster
from tests.sandboxd.refusing_envd import warm_box_refusing_init

if TYPE_CHECKING:
    from collections.abc import Iterator

    import httpx

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), nodes=1, gateways=1,
                         node_flags=("--pool", "1")) as running:  # fmt: skip
        yield running


def spawns(api: httpx.Client) -> int:
    listed = {t["templateID"]: t for t in api.get("/templates").json()}
    return int(listed["base"]["spawnCount"])


def test_a_create_whose_init_is_refused_leaves_no_catalog_row(cluster: Cluster) -> None:
    refusing = warm_box_refusing_init(cluster.nodes[0])
    with cluster.gateways[0].client() as api:
        counted = spawns(api)
        refused = api.post("/sandboxes", json={"templateID": "base"})
        assert refused.status_code == 413, refused.text
        assert "refused /init" in refused.json()["message"]
        assert refusing not in cluster.placed()  # written while /init ran, deleted after
        assert spawns(api) == counted
        made = api.post("/sandboxes", json={"templateID": "base"})
        assert made.status_code == 201, made.text
        sandbox_id = made.json()["sandboxID"]
        assert cluster.placed() == {sandbox_id: cluster.nodes[0].node_id}
        assert spawns(api) == counted + 1
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
