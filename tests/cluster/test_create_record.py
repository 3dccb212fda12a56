"""A create's catalog row, written by its node alongside envd's `/init` (sandboxd.node.
catalog_record), all real processes (tests/cluster/rig.py with one node agent, its pool of one,
and one gateway): a create whose `/init` is refused answers so, and leaves neither its row nor
its spawn's count behind; the next create is recorded and counted. A create whose row the
database refuses is refused, and its sandbox killed before the node answers: nothing runs that
no gateway knows, and nothing is counted. A node whose database is gone refuses creates as
StoreUnavailable and still lists what it runs."""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING

import psycopg
import pytest

from tests.cluster.rig import Cluster, running_cluster
from tests.sandboxd.refusing_envd import warm_box_refusing_init
from tests.waiting import wait_until

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


@contextlib.contextmanager
def catalog_refusing_rows(database_url: str) -> Iterator[None]:
    """The shared database refuses every new catalog row (a trigger) within the block."""
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute(
            "CREATE FUNCTION refuse_rows() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the test refuses catalog rows'; END $$"
        )
        db.execute("CREATE TRIGGER refuse_rows BEFORE INSERT ON sandbox_catalog "
                   "FOR EACH ROW EXECUTE FUNCTION refuse_rows()")  # fmt: skip
        try:
            yield
        finally:
            db.execute("DROP TRIGGER refuse_rows ON sandbox_catalog")
            db.execute("DROP FUNCTION refuse_rows()")


def test_a_create_whose_row_cannot_be_written_leaves_no_sandbox(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    before = set(cluster.on_node(node))
    with cluster.gateways[0].client() as api:
        counted = spawns(api)
        with catalog_refusing_rows(cluster.url):
            refused = api.post("/sandboxes", json={"templateID": "base"})
            assert refused.status_code == 503, refused.text
            message = refused.json()["message"]
            assert "the test refuses catalog rows" in message
            refused_id = re.search(r"recording sandbox (\S+) in the catalog", message)
            assert refused_id, message
            assert set(cluster.on_node(node)) == before
            # Killed before the node answered: its container and its files are gone.
            assert not (node.state_dir / "sandboxes" / refused_id[1]).exists()
        assert cluster.placed() == {}
        assert spawns(api) == counted
        made = api.post("/sandboxes", json={"templateID": "base"})
        assert made.status_code == 201, made.text
        assert cluster.placed() == {made.json()["sandboxID"]: node.node_id}
        assert api.delete(f"/sandboxes/{made.json()['sandboxID']}").status_code == 204


def test_a_node_without_its_database_refuses_creates_and_serves_the_rest(cluster: Cluster) -> None:
    """The database gone from under the node: a create is refused as StoreUnavailable, its
    sandboxes still listed; creates go on once it is back."""
    node = cluster.nodes[0]
    with cluster.gateways[0].client() as api:
        kept = api.post("/sandboxes", json={"templateID": "base"})
        assert kept.status_code == 201, kept.text
    before = set(cluster.on_node(node))
    config = {"template": "base", "timeout_s": 600, "secure": True, "auto_pause": False,
              "catalog": True}  # fmt: skip
    cluster.db.halt()
    try:
        refused = node.call_api("create", {"config": config})
        listed = set(cluster.on_node(node))
    finally:
        cluster.db.launch()
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "StoreUnavailable"
    assert "the database is unavailable" in refused.json()["message"]
    assert listed == before
    assert kept.json()["sandboxID"] in listed
    with cluster.gateways[0].client() as api:
        made = wait_until(lambda: _created(api), 120, "a create through the gateway once more")
        assert cluster.placed()[made] == node.node_id
        for sandbox_id in (made, kept.json()["sandboxID"]):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def _created(api: httpx.Client) -> str | None:
    """The id of a sandbox made through the gateway; None while it answers 503 (the database
    just back: the gateway's connections, the node's heartbeat)."""
    made = api.post("/sandboxes", json={"templateID": "base"})
    if made.status_code == 503:
        return None
    assert made.status_code == 201, made.text
    return str(made.json()["sandboxID"])
