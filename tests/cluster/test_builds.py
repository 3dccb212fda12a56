"""Template builds through gateways, all real processes (tests/cluster/rig.py: PostgreSQL, the
registry, two node agents, two gateways): a build requested through gateway A is handed to one
node, its upload (signed by A, relayed by A to that node) is seen through gateway B, its status
and log are paged through B, and the template it makes boots on every node with its files; a
bad upload is refused at the gateway as serve refuses it; deleting the template through a
gateway works; a build whose node is SIGKILLed mid-build ends in error naming the node."""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.builds import build_flow
from tests.builds.build_flow import tar_of
from tests.cluster.rig import Cluster, running_cluster
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.cluster.node_agent import NodeAgent

# A build boots a sandbox per RUN step and one per node afterwards: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(900)
GREETING = b"hello from the upload\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def recipe(files_hash: str, *runs: str) -> dict[str, Any]:
    copy = {"type": "COPY", "args": ["greeting.txt", "/home/user/greeting.txt", "user", ""],
            "filesHash": files_hash, "force": False}  # fmt: skip
    steps = [{"type": "RUN", "args": [run, "user"], "force": False} for run in runs]
    return {"fromTemplate": "base", "force": False, "steps": [copy, *steps]}


def build_node(cluster: Cluster, build: build_flow.Build) -> str:
    rows = cluster.rows("SELECT node_id FROM builds WHERE build_id = %s", build.build_id)
    assert rows, f"build {build.build_id} is not in the shared database"
    return str(rows[0][0])


def read_file(node: NodeAgent, sandbox_id: str, path: str) -> httpx.Response:
    """envd's file read in the sandbox, through the node's own proxy port."""
    headers = {**node.proxy_headers, "E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
    return httpx.get(node.proxy_url + "/files", params={"path": path, "username": "user"},
                     headers=headers, timeout=60)  # fmt: skip


def test_a_template_built_through_one_gateway_is_created_on_every_node(cluster: Cluster) -> None:
    a, b = cluster.gateways
    files_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    with a.client() as api_a, b.client() as api_b:
        build = build_flow.request(api_a, f"cluster-built-{secrets.token_hex(3)}")
        assert build_node(cluster, build) in {n.node_id for n in cluster.nodes}
        check = f"/templates/{build.template_id}/files/{files_hash}"
        offered = api_a.get(check).json()
        assert (offered["present"], offered["url"].startswith(a.url)) == (False, True), offered
        put = httpx.put(offered["url"], content=tar_of({"greeting.txt": GREETING}), timeout=60)
        assert put.is_success, put.text
        assert api_b.get(check).json()["present"] is True  # asked of the build's node
        started = build_flow.start(api_a, build, recipe(files_hash, "echo built > ~/built.txt"))
        assert started.status_code == 202, started.text
        build_flow.poll(api_b, build)
    assert build.status["status"] == "ready", build.status
    assert any("echo built" in m for m in build.messages), build.messages
    assert build.messages[-1] == "build finished: template ready"
    for node in cluster.nodes:
        config = {"template": build.template_id, "timeout_s": 300, "secure": False,
                  "auto_pause": False}  # fmt: skip
        made = node.call_api("create", {"config": config})
        assert made.status_code == 200, made.text
        sandbox_id = made.json()["sandbox_id"]
        try:
            assert read_file(node, sandbox_id, "/home/user/built.txt").text == "built\n"
            assert read_file(node, sandbox_id, "/home/user/greeting.txt").content == GREETING
        finally:
            assert node.call_api("kill", {"sandbox_id": sandbox_id}).is_success
    with b.client() as api_b:
        assert api_b.delete(f"/templates/{build.template_id}").status_code == 204
        assert api_b.get(f"/templates/{build.template_id}/tags").status_code == 404


def test_rebuilds_go_to_the_node_holding_their_steps_cache(cluster: Cluster) -> None:
    """Once every node holds the template's layers, placement alone could pick either: the
    rebuilds go where the first build ran, and reuse its step."""
    a, b = cluster.gateways
    name = f"cluster-rebuilt-{secrets.token_hex(3)}"
    stamp = {"fromTemplate": "base", "force": False,
             "steps": [{"type": "RUN", "args": ["date +%s%N > ~/stamp", "user"], "force": False}]}  # fmt: skip
    with a.client() as api_a, b.client() as api_b:
        first = build_flow.run(api_a, name, stamp)
        assert first.status["status"] == "ready", first.status
        for node in cluster.nodes:  # each pulls the template's layers: both hold them now
            config = {"template": first.template_id, "timeout_s": 300, "secure": False,
                      "auto_pause": False}  # fmt: skip
            made = node.call_api("create", {"config": config})
            assert made.status_code == 200, made.text
            assert node.call_api("kill", {"sandbox_id": made.json()["sandbox_id"]}).is_success
        for _ in range(3):
            again = build_flow.run(api_b, name, stamp)
            assert again.status["status"] == "ready", again.status
            assert build_node(cluster, again) == build_node(cluster, first)
            assert any("cached" in m.lower() for m in again.messages), again.messages
        assert api_b.delete(f"/templates/{first.template_id}").status_code == 204


def test_the_node_api_takes_uploads_with_the_cluster_token_only(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    files_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    route = f"{node.url}/node/v1/uploads/some-template/{files_hash}"
    archive = tar_of({"greeting.txt": GREETING})
    assert httpx.put(route, content=archive, timeout=60).status_code == 401
    stored = httpx.put(route, content=archive, headers=node.headers, timeout=60)
    assert stored.status_code == 204, stored.text
    present = node.call_api("upload_present", {"template_id": "some-template",
                                               "files_hash": files_hash})  # fmt: skip
    assert present.json() is True
    unknown = node.call_api("start_build", {"template_id": "some-template", "build_id": "nope",
                                            "recipe": {}})  # fmt: skip
    assert unknown.json()["code"] == "TemplateNotFound", unknown.text
    node.call_api("forget_template", {"template_id": "some-template"}).raise_for_status()
    gone = node.call_api("upload_present", {"template_id": "some-template",
                                            "files_hash": files_hash})  # fmt: skip
    assert gone.json() is False


def test_a_bad_upload_is_refused_at_the_gateway(cluster: Cluster) -> None:
    a, _ = cluster.gateways
    files_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    with a.client() as api:
        build = build_flow.request(api, f"cluster-refused-{secrets.token_hex(3)}")
        url = api.get(f"/templates/{build.template_id}/files/{files_hash}").json()["url"]
        forged = httpx.put(url.replace("signature=", "signature=0"), content=b"x", timeout=60)
        assert forged.status_code == 403, forged.text
        not_tar = httpx.put(url, content=b"not a tar at all", timeout=60)
        assert (not_tar.status_code, not_tar.json()["code"]) == (400, 400), not_tar.text
        assert "tar" in not_tar.json()["message"]
        malformed = api.get(f"/templates/{build.template_id}/files/NOTAHASH")
        assert malformed.status_code == 400, malformed.text
        assert api.delete(f"/templates/{build.template_id}").status_code == 204


def test_a_build_whose_node_is_lost_ends_in_error(cluster: Cluster) -> None:
    a, b = cluster.gateways
    files_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    with a.client() as api_a:
        build = build_flow.request(api_a, f"cluster-lost-{secrets.token_hex(3)}")
        build_flow.upload(api_a, build.template_id, files_hash, tar_of({"greeting.txt": GREETING}))
        # A step that never ends by itself: the node is killed while it runs.
        endless = "echo waiting for ever; while true; do sleep 1; done"
        assert build_flow.start(api_a, build, recipe(files_hash, endless)).status_code == 202
    node = next(n for n in cluster.nodes if n.node_id == build_node(cluster, build))

    def running() -> bool:
        rows = cluster.rows("SELECT message FROM build_logs WHERE build_id = %s", build.build_id)
        return any(r[0] == "waiting for ever" for r in rows)

    wait_until(running, 600, "the endless step to run")
    node.kill()
    with b.client() as api_b:
        build_flow.poll(api_b, build)
    assert build.status["status"] == "error", build.status
    assert node.node_id in build.status["reason"]["message"], build.status
