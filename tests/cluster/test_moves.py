"""A sandbox paused to disk through a gateway resumes on another node once its own is gone, all
real processes: Debian's PostgreSQL and docker-registry of this module's own, two `sandboxd node`
agents pushing their layers to the registry and two `sandboxd gateway`s. Its node SIGKILLed,
its resume through the other gateway boots it on the other node, which pulls its layers from
the registry, with its files and metadata, and so does one its node paused to disk at its end
(the reconciliation noted its record); a sandbox paused with its memory on the killed node
cannot move (409, saying why); the killed node restarted drops its stale copy, its own layer
of it, and leaves the moved sandbox and the registry's layers alone. A node without a registry
hands out no record, and its sandbox paused to disk through a gateway cannot move once the node
is gone (409, saying why)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from sandboxd.cluster.catalog import LOST_KEY
from sandboxd.images.layer_registry import LayerRegistry
from tests.cluster.gateway import Gateway
from tests.cluster.node_agent import running_node
from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.cluster.node_agent import NodeAgent
    from tests.store.postgres_server import PostgresServer

# Boots, a lease's expiry and a node agent's restart: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(900)
MARKER = (
    "echo moved-with-me > /home/user/marker && mkdir -p /home/user/d && echo deep > /home/user/d/f"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("moves")) as running:
        yield running


def create(gateway: Gateway, purpose: str, **more: object) -> dict[str, Any]:
    new = {"templateID": "base", "timeout": 600, "secure": True, "metadata": {"purpose": purpose},
           **more}  # fmt: skip
    with gateway.client() as client:
        answer = client.post("/sandboxes", json=new)
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def pause_layers(node: NodeAgent, sandbox_id: str) -> list[str]:
    return sorted(p.name for p in (node.state_dir / "layers").glob(f"pause-{sandbox_id}-*"))


def record_of(cluster: Cluster, sandbox_id: str) -> Any:
    [(record,)] = cluster.rows("SELECT record FROM sandbox_catalog WHERE sandbox_id = %s",
                               sandbox_id)  # fmt: skip
    return record


def test_a_disk_paused_sandbox_resumes_on_another_node(cluster: Cluster) -> None:
    a, b = cluster.gateways
    home, other = cluster.nodes
    cluster.drain(other, draining=True)  # both sandboxes on `home`
    try:
        moving, frozen = create(a, "move"), create(a, "stay")
        # Paused to disk by its node at its end: the reconciliation notes its record.
        ending = create(a, "end", timeout=5, autoPause=True, autoPauseMemory=False)["sandboxID"]
    finally:
        cluster.drain(other, draining=False)
    sid, held = moving["sandboxID"], frozen["sandboxID"]
    assert cluster.placed() == {sid: home.node_id, held: home.node_id, ending: home.node_id}
    home.sh(sid, MARKER, moving["envdAccessToken"])
    with a.client() as client:
        assert client.post(f"/sandboxes/{sid}/pause", json={"memory": False}).status_code == 204
        assert client.post(f"/sandboxes/{held}/pause", json={}).status_code == 204
    assert record_of(cluster, sid) is not None  # what another node resumes it from
    assert record_of(cluster, held) is None  # its memory is its node's
    wait_until(lambda: record_of(cluster, ending), 120, "the record of the one paused at its end")
    [layer] = pause_layers(home, sid)
    home.kill()  # SIGKILL: the node is gone, its lease runs out
    shown = wait_until(lambda: _lost(b, sid), 120, "the node's lease to expire")
    assert "boots it on another node" in shown["metadata"][LOST_KEY]
    assert shown["state"] == "paused"

    with b.client() as client:
        resumed = client.post(f"/sandboxes/{sid}/connect", json={"timeout": 300})
        assert resumed.status_code == 201, resumed.text
        refused = client.post(f"/sandboxes/{held}/connect", json={"timeout": 300})
        assert refused.status_code == 409, refused.text
        assert "paused with its memory" in refused.json()["message"]
        after = client.get(f"/sandboxes/{sid}").json()
        woken = client.post(f"/sandboxes/{ending}/connect", json={"timeout": 300})
        assert woken.status_code == 201, woken.text
    assert cluster.placed()[sid] == cluster.placed()[ending] == other.node_id
    assert cluster.rows("SELECT name FROM cluster_locks WHERE name LIKE %s", "move-%") == []
    assert pause_layers(other, sid) == [layer]  # pulled from the registry into its own store
    token = resumed.json()["envdAccessToken"]
    assert token == moving["envdAccessToken"]  # the one its create gave, kept with its record
    assert other.sh(sid, "cat /home/user/marker /home/user/d/f", token) == "moved-with-me\ndeep\n"
    assert (after["state"], after["metadata"]) == ("running", {"purpose": "move"})
    assert record_of(cluster, sid) is None  # running: nothing to move from

    home.start()  # back: the catalog is the truth
    # Its node lists it no more once the kill begins; its layers go by the kill's end.
    wait_until(lambda: sid not in cluster.on_node(home) and not pause_layers(home, sid), 300,
               "the stale copy and its pause layer to be dropped")  # fmt: skip
    assert held in cluster.on_node(home)
    remote = LayerRegistry(cluster.registry)
    try:
        assert remote.has(layer)
    finally:
        remote.close()
    assert other.sh(sid, "cat /home/user/marker", token) == "moved-with-me\n"
    with b.client() as client:
        assert client.post(f"/sandboxes/{held}/connect", json={"timeout": 60}).status_code == 201
        for done in (sid, held, ending):
            assert client.delete(f"/sandboxes/{done}").status_code == 204


def _lost(gateway: Gateway, sandbox_id: str) -> dict[str, Any] | None:
    with gateway.client() as client:
        shown: dict[str, Any] = client.get(f"/sandboxes/{sandbox_id}").json()
    message = (shown.get("metadata") or {}).get(LOST_KEY, "")
    return shown if "stopped answering (lease expired at" in message else None


def test_a_node_without_a_registry_keeps_its_paused_sandboxes(
    tmp_path: Path, base_template: Path, postgres_server: PostgresServer
) -> None:
    """Its record is not handed out (NotMovable, 409, saying why), a record that is not a
    disk-paused sandbox's is not taken in, and its sandbox paused to disk through a gateway
    cannot be resumed elsewhere once it is gone: a 409 saying why."""
    url = postgres_server.create_database()
    flags = ("--pool", "0", "--heartbeat-s", "0.5", "--lease-s", "2")
    with running_node(tmp_path / "state", base_template, url, "alone", *flags) as node:
        _refused_by_the_node(node)
        gateway = Gateway(tmp_path / "gateway", url, node.token)
        try:
            gateway.start()
            sid = create(gateway, "alone")["sandboxID"]
            with gateway.client() as client:
                paused = client.post(f"/sandboxes/{sid}/pause", json={"memory": False})
                assert paused.status_code == 204, paused.text
            [(unmovable,)] = cluster_rows(url, "SELECT unmovable FROM sandbox_catalog")
            assert "shares no registry" in unmovable
            node.kill()
            wait_until(lambda: _lost(gateway, sid), 120, "the node's lease to expire")
            with gateway.client() as client:
                refused = client.post(f"/sandboxes/{sid}/connect", json={"timeout": 60})
            assert refused.status_code == 409, refused.text
            assert "shares no registry (--registry)" in refused.json()["message"]
        finally:
            gateway.stop()


def _refused_by_the_node(node: NodeAgent) -> None:
    made = node.call_api("create", {"config": {"template": "base", "timeout_s": 300,
                                               "secure": False, "auto_pause": False}})  # fmt: skip
    assert made.status_code == 200, made.text
    sid = made.json()["sandbox_id"]
    running = node.call_api("paused_record", {"sandbox_id": sid})
    assert (running.status_code, running.json()["code"]) == (409, "NotMovable")
    assert "not paused to disk" in running.json()["message"]
    paused = node.call_api("pause", {"sandbox_id": sid, "memory": False})
    assert paused.status_code == 200, paused.text
    refused = node.call_api("paused_record", {"sandbox_id": sid})
    assert (refused.status_code, refused.json()["code"]) == (409, "NotMovable")
    assert "shares no registry" in refused.json()["message"]
    record = {"sandbox_id": "elsewhere", "template_id": "base", "alias": None,
              "state": "running", "started_at": 1, "end_at": 2, "timeout_s": 300,
              "secure": False, "auto_pause": False, "cpu_count": 2, "memory_mb": 512,
              "disk_size_mb": 1024, "envd_version": "0.1.0"}  # fmt: skip
    taken = node.call_api("adopt_paused", {"record": record})
    assert (taken.status_code, taken.json()["code"]) == (409, "NotMovable")
    assert node.call_api("kill", {"sandbox_id": sid}).status_code == 200


def cluster_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql.encode()).fetchall()
