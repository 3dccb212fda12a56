"""Volumes through gateways, all real processes (the rig of tests/cluster/rig.py: PostgreSQL, two
node agents, two gateways): a volume made through one gateway lives on one node, its home, and is
recorded with it in the shared database; its files are written and read through either gateway
with the token either handed out, streamed through to the home; a sandbox mounting it, created
through a gateway, lands on the home and sees the files; its delete is refused while mounted,
then removes it from its home's disk. One name created through both gateways at once makes
one volume and one refusal. Volumes of two nodes in one create are a 400 naming them,
a draining home a 503; a home node SIGKILLed leaves its volumes listed, and their files, delete
and mounts answered 503 naming it."""

from __future__ import annotations

import hashlib
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.cluster.gateway import Gateway
    from tests.cluster.node_agent import NodeAgent

pytestmark = pytest.mark.timeout(900)
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster-volumes")) as running:
        yield running


def new_volume(gateway: Gateway) -> dict[str, str]:
    with gateway.client() as client:
        answer = client.post("/volumes", json={"name": f"vol-{uuid.uuid4().hex[:8]}"})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def home_of(cluster: Cluster, volume: dict[str, str]) -> NodeAgent:
    rows = cluster.rows("SELECT node_id FROM volumes WHERE volume_id = %s", volume["volumeID"])
    assert len(rows) == 1, rows
    return next(n for n in cluster.nodes if n.node_id == rows[0][0])


def content(gateway: Gateway, volume: dict[str, str]) -> httpx.Client:
    """A client of the gateway's content API with the volume's token."""
    return httpx.Client(base_url=f"{gateway.url}/volumecontent/{volume['volumeID']}",
                        headers={"authorization": f"Bearer {volume['token']}"}, timeout=120)  # fmt: skip


def create(gateway: Gateway, mounts: list[dict[str, str]]) -> httpx.Response:
    body = {"templateID": "base", "secure": True, "timeout": 600, "volumeMounts": mounts}
    with gateway.client() as client:
        return client.post("/v2/sandboxes", json=body)


def volume_on(cluster: Cluster, gateway: Gateway, node_id: str) -> dict[str, str]:
    """A volume made while every other node drains (placement's only choice)."""
    others = [n.node_id for n in cluster.nodes if n.node_id != node_id]
    cluster.set_draining(others, True)
    try:
        volume = new_volume(gateway)
    finally:
        cluster.set_draining(others, False)
    assert home_of(cluster, volume).node_id == node_id
    return volume


def test_written_through_one_gateway_mounted_through_the_other_on_its_home(
    cluster: Cluster,
) -> None:
    a, b = cluster.gateways
    volume = new_volume(a)
    home = home_of(cluster, volume)
    assert (home.state_dir / "volumes" / f"{volume['volumeID']}.img").is_file()
    data = os.urandom(5 * MIB + 123)

    def chunks() -> Iterator[bytes]:  # no length: the upload streams, chunked, through
        for offset in range(0, len(data), MIB):
            yield data[offset : offset + MIB]

    with content(b, volume) as files:
        made = files.put("/file", params={"path": "/big.bin"}, content=chunks())
        assert made.status_code == 201, made.text
        assert made.json()["size"] == len(data)
        assert files.put("/file", params={"path": "/hello.txt"}, content=b"hi\n").status_code == 201
        for path, again in (("/hello.txt", b"again"), ("/big.bin", chunks())):
            taken = files.put("/file", params={"path": path}, content=again)
            assert taken.status_code == 409  # a large body too: refused before it is read
            assert taken.json()["code"] == "conflict"
    with content(a, volume) as files:
        digest = hashlib.sha256()
        with files.stream("GET", "/file", params={"path": "/big.bin"}) as read:
            assert read.status_code == 200
            assert read.headers["content-type"] == "application/octet-stream"
            for chunk in read.iter_bytes():
                digest.update(chunk)
        assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
        listed = files.get("/dir", params={"path": "/"}).json()
        assert sorted(e["name"] for e in listed) == ["big.bin", "hello.txt"]
        assert files.get("/path", params={"path": "/none"}).json()["code"] == "not_found"

    sandboxes = []
    for gateway in (a, b, a):  # each lands on the home, whatever placement would pick
        made = create(gateway, [{"name": volume["name"], "path": "/mnt/shared"}])
        assert made.status_code == 201, made.text
        sandboxes.append(made.json())
        assert cluster.placed()[sandboxes[-1]["sandboxID"]] == home.node_id
    first = sandboxes[0]
    seen = home.sh(first["sandboxID"], "cat /mnt/shared/hello.txt", first["envdAccessToken"])
    assert seen == "hi\n"

    with b.client() as client:
        refused = client.delete(f"/volumes/{volume['volumeID']}")
        assert refused.status_code == 409, refused.text
        assert refused.json()["message"] == f"Volume '{volume['name']}' is mounted in a sandbox"
        for sandbox in sandboxes:
            assert client.delete(f"/sandboxes/{sandbox['sandboxID']}").status_code == 204
        assert client.delete(f"/volumes/{volume['volumeID']}").status_code == 204
    with a.client() as client:
        assert client.get(f"/volumes/{volume['volumeID']}").status_code == 404
    assert not (home.state_dir / "volumes" / f"{volume['volumeID']}.img").exists()
    with content(a, volume) as files:
        assert files.get("/path", params={"path": "/"}).status_code == 404


def test_a_token_names_its_volume_and_names_are_the_teams_once(cluster: Cluster) -> None:
    a, b = cluster.gateways
    first, second = new_volume(a), new_volume(b)
    with b.client() as client:
        taken = client.post("/volumes", json={"name": first["name"]})
        assert taken.status_code == 400
        assert taken.json()["message"] == f"Volume with name '{first['name']}' already exists"
        listed = {v["volumeID"] for v in client.get("/volumes").json()}
        assert {first["volumeID"], second["volumeID"]} <= listed
    wrong = dict(second, token=first["token"])
    with content(b, wrong) as files:
        refused = files.get("/path", params={"path": "/"})
        assert refused.status_code == 401
        assert refused.json() == {"code": "unauthorized",
                                  "message": "Invalid or expired volume token"}  # fmt: skip
    with a.client() as client:
        for volume in (first, second):
            assert client.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_one_name_created_through_both_gateways_at_once_is_one_volume(cluster: Cluster) -> None:
    name = f"vol-{uuid.uuid4().hex[:8]}"

    def make(gateway: Gateway) -> httpx.Response:
        with gateway.client() as client:
            return client.post("/volumes", json={"name": name})

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(make, cluster.gateways))
    assert sorted(a.status_code for a in answers) == [201, 400], [a.text for a in answers]
    made = next(a for a in answers if a.status_code == 201).json()
    refused = next(a for a in answers if a.status_code == 400)
    assert refused.json()["message"] == f"Volume with name '{name}' already exists"
    images = [p.name for n in cluster.nodes for p in (n.state_dir / "volumes").glob("*.img")]
    assert images == [f"{made['volumeID']}.img"]  # the other's, if made, removed again
    with cluster.gateways[0].client() as client:
        assert client.delete(f"/volumes/{made['volumeID']}").status_code == 204


def test_volumes_of_two_nodes_in_one_create_and_a_draining_home(cluster: Cluster) -> None:
    a, _ = cluster.gateways
    one = volume_on(cluster, a, "node-a")
    two = volume_on(cluster, a, "node-b")
    refused = create(a, [{"name": one["name"], "path": "/one"},
                         {"name": two["name"], "path": "/two"}])  # fmt: skip
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == (
        "a sandbox can only mount volumes of one node: "
        f"'{one['name']}' on node node-a, '{two['name']}' on node node-b"
    )
    cluster.set_draining(["node-a"], True)
    try:
        refused = create(a, [{"name": one["name"], "path": "/one"}])
    finally:
        cluster.set_draining(["node-a"], False)
    assert refused.status_code == 503, refused.text
    assert refused.json()["message"] == (
        f"volume '{one['name']}' is on node node-a, which is draining: it takes no new sandboxes"
    )
    with a.client() as client:
        for volume in (one, two):
            assert client.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_a_home_node_killed(cluster: Cluster) -> None:
    a, b = cluster.gateways
    lost = cluster.nodes[1]
    volume = volume_on(cluster, a, lost.node_id)
    lost.kill()

    with content(b, volume) as files:
        cut = files.get("/path", params={"path": "/"})
    assert cut.status_code == 503, cut.text
    assert cut.json()["code"] == "unavailable"
    assert f"volume '{volume['name']}' is on node {lost.node_id}" in cut.json()["message"]

    def refused_as_expired() -> bool:
        answer = create(a, [{"name": volume["name"], "path": "/data"}])
        assert answer.status_code == 503, answer.text
        return "whose lease expired" in answer.json()["message"]

    wait_until(refused_as_expired, 120, f"{lost.node_id}'s lease to expire")
    expired = (f"volume '{volume['name']}' is on node {lost.node_id}, whose lease expired: its "
               "files cannot be reached until the node is back")  # fmt: skip
    with b.client() as client:
        assert volume["volumeID"] in {v["volumeID"] for v in client.get("/volumes").json()}
        refused = client.delete(f"/volumes/{volume['volumeID']}")
        assert refused.status_code == 503
        assert refused.json()["message"] == expired
    with content(a, volume) as files:
        cut = files.put("/file", params={"path": "/x"}, content=b"x")
    assert cut.json() == {"code": "unavailable", "message": expired}
    assert create(a, [{"name": volume["name"], "path": "/data"}]).json()["message"] == expired
