"""A node agent SIGKILLed under load, over the rig of this module's own (PostgreSQL, two node
agents, two gateways, all real processes): creates keep coming through both gateways while
node-b dies; each is answered 201 (those in flight on node-b are placed again on node-a within
the create's deadline), the sandboxes made on node-b before it died are listed lost, those on
node-a serve; node-b restarted adopts its sandboxes and the catalog's, no longer lost, are the
ones it runs (a create it finished whose answer died with it is reaped)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from sandboxd.cluster.catalog import LOST_KEY
from tests.cluster.rig import Cluster, running_cluster
from tests.cluster.test_gateway import NEW, envd_get
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from concurrent.futures import Future

    from tests.cluster.gateway import Gateway

# A lease's expiry, a create's deadline and the reaping of what the killed node finished.
pytestmark = pytest.mark.timeout(900)
CREATES_AFTER_KILL = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("faults")) as running:
        yield running


class Load:
    """Creates one after the other on each of the gateways, until stopped; every answer kept."""

    def __init__(self, gateways: list[Gateway]) -> None:
        self.gateways = gateways
        self.answers: list[tuple[int, dict[str, object]]] = []
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def run(self, gateway: Gateway) -> None:
        with gateway.client() as client:
            while not self.stopped.is_set():
                answer = client.post("/sandboxes", json=NEW)
                with self.lock:
                    self.answers.append((answer.status_code, answer.json()))

    def count(self) -> int:
        with self.lock:
            return len(self.answers)


def test_a_node_killed_under_load(cluster: Cluster) -> None:
    a, b = cluster.gateways
    doomed = cluster.nodes[1]
    load = Load([a, b])
    with ThreadPoolExecutor(2) as creators:
        running = [creators.submit(load.run, g) for g in (a, b)]
        wait_until(lambda: _placed_on(cluster, doomed.node_id) >= 2 or _failed(running), 300,
                   "two creates to land on node-b")  # fmt: skip
        doomed.kill()
        killed_at = load.count()
        wait_until(lambda: load.count() >= killed_at + CREATES_AFTER_KILL or _failed(running),
                   600, "creates answered after node-b's death")  # fmt: skip
        load.stopped.set()
        for creator in running:
            creator.result()

    refused = [(status, body) for status, body in load.answers if status != 201]
    assert not refused, refused
    made = [str(body["sandboxID"]) for _, body in load.answers]
    placed = cluster.placed()
    on_a = [s for s in made if placed[s] == "node-a"]
    on_b = [s for s in made if placed[s] == doomed.node_id]
    assert len(on_a) >= CREATES_AFTER_KILL
    assert len(on_b) >= 2
    for sandbox_id in on_a:
        sandbox = next(body for _, body in load.answers if body["sandboxID"] == sandbox_id)
        assert envd_get(b, sandbox, "/health").status_code == 204
    wait_until(lambda: _listed_lost(b, on_b), 120, "node-b's sandboxes to be listed lost")

    doomed.start()
    wait_until(lambda: not _listed_lost(a, on_b, any_of=True), 120,
               "node-b's sandboxes to be listed running again")  # fmt: skip
    wait_until(lambda: sorted(cluster.on_node(doomed)) == sorted(_catalog_of(cluster, "node-b")),
               300, "node-b to run exactly what the catalog gives it")  # fmt: skip
    assert set(on_b) <= set(cluster.on_node(doomed))
    with a.client() as client:
        for sandbox_id in made:
            assert client.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def _failed(creators: list[Future[None]]) -> bool:
    """Whether a creator stopped (its error is raised by its result())."""
    return any(c.done() for c in creators)


def _placed_on(cluster: Cluster, node_id: str) -> int:
    return sum(1 for n in cluster.placed().values() if n == node_id)


def _catalog_of(cluster: Cluster, node_id: str) -> list[str]:
    return [s for s, n in cluster.placed().items() if n == node_id]


def _listed_lost(gateway: Gateway, sandbox_ids: list[str], any_of: bool = False) -> bool:
    with gateway.client() as client:
        listed = {s["sandboxID"]: s for s in client.get("/v2/sandboxes").json()}
    lost = (LOST_KEY in (listed.get(s, {}).get("metadata") or {}) for s in sandbox_ids)
    return any(lost) if any_of else all(lost)
