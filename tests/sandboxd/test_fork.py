"""A fork over the wire (`POST /sandboxes/{id}/fork`): children with the parent's files and
settings but their own ids, tokens and writes, booted cold; the parent running on untouched;
each refusal in the reference's words; a child that cannot boot an error entry; children paused
to disk, resumed and kept across a restart of serve; the fork layer kept while a child stacks
it and gone after the last."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.sandboxd.guest_shell import background, sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.sandboxd.test_disk_pause import SLEEPERS, collected
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

STATE = "/home/user/state.txt"
NETWORK = {"denyOut": ["10.9.9.0/24"], "allowPublicTraffic": False}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("fork"), base_template, NO_NETWORK) as s:
        yield s


def create(api: httpx.Client, **more: Any) -> dict[str, str]:
    body = {"templateID": "base", "secure": True, "timeout": 300, **more}
    answer = api.post("/sandboxes", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def parent_with_state(server: Sandboxd, api: httpx.Client, **more: Any) -> dict[str, str]:
    """A new sandbox that wrote STATE, "state before fork"."""
    parent = create(api, **more)
    sh(server, parent["sandboxID"], f"echo 'state before fork' > {STATE}",
       parent["envdAccessToken"])  # fmt: skip
    return parent


def fork(api: httpx.Client, sandbox_id: str, count: int, **more: Any) -> list[dict[str, str]]:
    """The children of a fork that must start them all."""
    answer = api.post(f"/sandboxes/{sandbox_id}/fork", json={"count": count, **more})
    assert answer.status_code == 201, answer.text
    entries = answer.json()
    assert len(entries) == count
    assert all(list(entry) == ["sandbox"] for entry in entries), entries
    return [entry["sandbox"] for entry in entries]


def lifetime_s(info: dict[str, Any]) -> float:
    ends = (datetime.fromisoformat(info[key]) for key in ("endAt", "startedAt"))
    return next(ends).timestamp() - next(ends).timestamp()


def fork_layers(state: Path, parent_id: str) -> list[str]:
    return made_by(state, f"fork-{parent_id}-")


def test_a_child_has_the_parents_files_and_settings_and_the_parent_runs_on(
    server: Sandboxd,
) -> None:
    with server.client() as api:
        metadata = {"suite": "fork", "odd key": "a/b&c=d"}
        lifecycle = {"autoPause": True, "autoResume": {"enabled": True}}
        parent = parent_with_state(server, api, metadata=metadata, envVars={"GREETING": "hi"},
                                   network=NETWORK, **lifecycle)  # fmt: skip
        pid, ptoken = parent["sandboxID"], parent["envdAccessToken"]
        sh(server, pid, "rm /etc/issue", ptoken)
        background(server, pid, "sleep 3600", ptoken)
        sleeper = wait_until(lambda: sh(server, pid, SLEEPERS, ptoken).strip(), 30, "the sleep")
        before = api.get(f"/sandboxes/{pid}").json()

        [child] = fork(api, pid, 1, timeout=120)
        cid, ctoken = child["sandboxID"], child["envdAccessToken"]
        assert cid != pid
        assert ctoken != ptoken
        assert (child["templateID"], child["alias"], child["domain"]) == ("base", "base",
                                                                          parent["domain"])  # fmt: skip
        assert child["trafficAccessToken"] not in (None, parent["trafficAccessToken"])
        assert sh(server, cid, f"cat {STATE}", ctoken) == "state before fork\n"
        assert sh(server, cid, 'echo "$GREETING"', ctoken) == "hi\n"
        assert sh(server, cid, "ls /etc/issue 2>&1 || true", ctoken).endswith(
            "No such file or directory\n"
        )  # what the parent removed stays removed
        assert sh(server, cid, SLEEPERS, ctoken).strip() == ""  # a cold boot: no processes
        sh(server, cid, f"echo 'modified in fork' > {STATE}", ctoken)
        assert sh(server, pid, f"cat {STATE}", ptoken) == "state before fork\n"
        assert server.envd(cid, "GET", "/envs", token=ptoken)[0] == 401  # its own token
        with httpx.Client(base_url=server.url, timeout=30) as proxy:  # its own traffic token
            port = {"E2b-Sandbox-Id": cid, "E2b-Sandbox-Port": "8090"}
            assert proxy.get("/", headers=port).status_code == 403
            parents = {**port, "e2b-traffic-access-token": parent["trafficAccessToken"]}
            assert proxy.get("/", headers=parents).json()["message"] == (
                "Sandbox is secured with traffic access token. Provided token is invalid."
            )

        after = api.get(f"/sandboxes/{pid}").json()
        assert (after["state"], after["endAt"], after["startedAt"]) == (
            "running", before["endAt"], before["startedAt"])  # fmt: skip
        assert sh(server, pid, SLEEPERS, ptoken).strip() == sleeper
        info = api.get(f"/sandboxes/{cid}").json()
        assert info["state"] == "running"
        assert lifetime_s(info) == 120
        for key in ("metadata", "network", "lifecycle", "allowInternetAccess", "templateID"):
            assert info[key] == before[key], key
        assert info["lifecycle"] == {"autoResume": True, "onTimeout": "pause"}
        for sandbox_id in (pid, cid):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_count_and_timeout_and_every_refusal(server: Sandboxd) -> None:
    with server.client() as api:
        pid = create(api)["sandboxID"]
        children = fork(api, pid, 2, timeout=60)
        ids = {c["sandboxID"] for c in children}
        assert len(ids) == 2
        assert pid not in ids
        for cid in ids:
            assert lifetime_s(api.get(f"/sandboxes/{cid}").json()) == 60
            assert api.delete(f"/sandboxes/{cid}").status_code == 204
        default = api.post(f"/sandboxes/{pid}/fork")  # no body: one child for 15 s
        assert default.status_code == 201, default.text
        [entry] = default.json()
        assert lifetime_s(api.get(f"/sandboxes/{entry['sandbox']['sandboxID']}").json()) == 15
        assert api.delete(f"/sandboxes/{entry['sandbox']['sandboxID']}").status_code == 204

        refusals = [
            ({"count": 0}, 400, "Count must be at least 1"),
            ({"count": -3}, 400, "Count must be at least 1"),
            ({"count": 101}, 400, "Count cannot be greater than 100"),
            ({"timeout": 10**6}, 400, "Timeout cannot be greater than 24 hours"),
        ]
        for body, status, message in refusals:
            answer = api.post(f"/sandboxes/{pid}/fork", json=body)
            assert answer.json() == {"code": status, "message": message}, body
        malformed: list[dict[str, Any]] = [{"count": "2"}, {"timeout": -1}]
        for bad in malformed:
            answer = api.post(f"/sandboxes/{pid}/fork", json=bad)
            assert answer.status_code == 400
            assert answer.json()["message"].startswith("validation error: "), answer.text
        paused = f"Sandbox '{pid}' is paused and cannot be forked; resume it first"
        for pause in ({}, {"memory": False}):
            assert api.post(f"/sandboxes/{pid}/pause", json=pause).status_code == 204
            answer = api.post(f"/sandboxes/{pid}/fork", json={})
            assert answer.json() == {"code": 409, "message": paused}
            assert api.post(f"/sandboxes/{pid}/resume", json={"timeout": 60}).status_code == 201
        assert api.delete(f"/sandboxes/{pid}").status_code == 204
        for gone in (pid, "inosuchsandbox0000000"):
            answer = api.post(f"/sandboxes/{gone}/fork", json={})
            missing = f"Sandbox \"{gone}\" doesn't exist or you don't have access to it"
            assert answer.json() == {"code": 404, "message": missing}
        assert fork_layers(server.state_dir, pid) == []


def test_children_that_cannot_boot_are_error_entries_and_their_layer_goes(
    server: Sandboxd,
) -> None:
    """The parent removed its init: it runs on, but no child of it boots."""
    with server.client() as api:
        parent = create(api)
        pid, token = parent["sandboxID"], parent["envdAccessToken"]
        sh(server, pid, "rm /sbin/init", token)
        answer = api.post(f"/sandboxes/{pid}/fork", json={"count": 2})
        assert answer.status_code == 201, answer.text
        for entry in answer.json():
            assert list(entry) == ["error"], entry
            assert entry["error"]["code"] == 500  # an unusable image, as at a create
            assert "no /sbin/init in the template's layers" in entry["error"]["message"], entry
        assert fork_layers(server.state_dir, pid) == []
        assert [s["sandboxID"] for s in api.get("/v2/sandboxes").json()] == [pid]
        assert sh(server, pid, "echo alive", token) == "alive\n"
        assert api.delete(f"/sandboxes/{pid}").status_code == 204


def test_children_pause_to_disk_outlive_a_restart_and_the_parent_and_free_the_layer_last(
    tmp_path: Path, base_template: Path
) -> None:
    state = tmp_path / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as server:
        with server.client() as api:
            pid = parent_with_state(server, api)["sandboxID"]
            # Resumed from disk, the parent stacks a pause layer of its own: so will its children.
            assert api.post(f"/sandboxes/{pid}/pause", json={"memory": False}).status_code == 204
            assert api.post(f"/sandboxes/{pid}/resume", json={"timeout": 600}).status_code == 201
            first, second = fork(api, pid, 2, timeout=600)
            [layer] = fork_layers(state, pid)
            one, token_one = first["sandboxID"], first["envdAccessToken"]
            two, token_two = second["sandboxID"], second["envdAccessToken"]
            sh(server, one, "echo mine > /home/user/own", token_one)
            assert api.post(f"/sandboxes/{one}/pause", json={"memory": False}).status_code == 204
            assert api.post(f"/sandboxes/{one}/resume", json={"timeout": 600}).status_code == 201
            assert sh(server, one, f"cat {STATE} /home/user/own", token_one) == (
                "state before fork\nmine\n"
            )
            assert api.delete(f"/sandboxes/{pid}").status_code == 204
            assert fork_layers(state, pid) == [layer]  # its children stack it
            assert made_by(state, f"pause-{pid}-") == [f"pause-{pid}-1"]  # and its pause layer
            assert api.post(f"/sandboxes/{two}/pause", json={"memory": False}).status_code == 204
        server.stop()
        assert collected(state) == []  # the one collection rule keeps it too
        server.start()
        with server.client() as api:
            listed = {s["sandboxID"]: s["state"] for s in api.get("/v2/sandboxes").json()}
            assert listed == {one: "running", two: "paused"}
            assert sh(server, one, "cat /home/user/own", token_one) == "mine\n"
            assert api.post(f"/sandboxes/{two}/connect", json={"timeout": 60}).status_code == 201
            assert sh(server, two, f"cat {STATE}", token_two) == "state before fork\n"
            assert api.delete(f"/sandboxes/{one}").status_code == 204
            assert fork_layers(state, pid) == [layer]
            assert sh(server, two, f"cat {STATE}", token_two) == "state before fork\n"
            assert api.delete(f"/sandboxes/{two}").status_code == 204
            assert fork_layers(state, pid) == []
        assert made_by(state, "pause-") == []


def made_by(state: Path, prefix: str) -> list[str]:
    """The layers of the store whose names start with `prefix`."""
    return sorted(p.name for p in (state / "layers").iterdir() if p.name.startswith(prefix))
