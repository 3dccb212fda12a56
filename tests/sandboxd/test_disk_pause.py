"""A pause to disk over the wire (`POST /sandboxes/{id}/pause {"memory": false}`): the files kept,
the processes and memory not, the resume a boot under the same id and envd token; listed paused
with its `pauseMode`; across a restart of serve; a kill that leaves no layer; a connect with
`memory: false` that boots a frozen sandbox from its files; the refusals. A full pause writes its
files to a pause layer as well, deleted by its thaw (tests/sandboxd/test_crash.py: what it is
for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandboxd.builds.collect import layer_users
from sandboxd.layers.collect import collect
from sandboxd.layers.store import LayerStore
from sandboxd.store.sqlite.store import SqliteStore
from tests.sandboxd.guest_shell import background, sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

FS = {"memory": False}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("disk-pause"), base_template, NO_NETWORK) as s:
        yield s


def create(api: httpx.Client) -> dict[str, str]:
    answer = api.post("/sandboxes", json={"templateID": "base", "secure": True, "timeout": 300})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def prepared(server: Sandboxd, api: httpx.Client, marker: str) -> tuple[str, str]:
    """A new sandbox (its id and token) with `marker` in /home/user/marker and a `sleep`
    running."""
    sandbox = create(api)
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    sh(server, sid, f"echo {marker} > /home/user/marker", token)
    background(server, sid, "sleep 3600", token)
    return sid, token


BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
SLEEPERS = "pgrep -x sleep || true"


def pause_layers(server: Sandboxd, sandbox_id: str) -> list[str]:
    layers = server.state_dir / "layers"
    return [p.name for p in layers.iterdir() if p.name.startswith(f"pause-{sandbox_id}-")]


def test_files_survive_a_pause_to_disk_and_the_resume_is_a_boot_with_the_same_token(
    server: Sandboxd,
) -> None:
    with server.client() as api:
        sid, token = prepared(server, api, "persisted")
        assert sh(server, sid, SLEEPERS, token).strip()
        boot_before = sh(server, sid, BOOT_ID, token)
        assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
        info = api.get(f"/sandboxes/{sid}").json()
        assert (info["state"], info["pauseMode"]) == ("paused", "filesystem")
        listed = {s["sandboxID"]: s for s in api.get("/v2/sandboxes?state=paused").json()}
        assert listed[sid]["pauseMode"] == "filesystem"
        assert server.traces(sid) == []  # nothing of it on the host but its layer
        assert len(pause_layers(server, sid)) == 1
        resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        assert resumed.json()["sandboxID"] == sid
        assert resumed.json()["envdAccessToken"] == token
        assert "pauseMode" not in api.get(f"/sandboxes/{sid}").json()
        assert sh(server, sid, "cat /home/user/marker", token) == "persisted\n"
        assert sh(server, sid, BOOT_ID, token) != boot_before
        assert sh(server, sid, SLEEPERS, token).strip() == ""
        assert server.envd(sid, "GET", "/envs", token=token)[0] == 200
        assert server.envd(sid, "GET", "/envs", token="0" * len(token))[0] == 401
        # A second pause to disk stacks a second layer; its resume by POST .../resume.
        sh(server, sid, "echo again > /home/user/second", token)
        assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
        assert api.post(f"/sandboxes/{sid}/resume", json={"timeout": 60}).status_code == 201
        assert sh(server, sid, "cat /home/user/marker /home/user/second", token) == (
            "persisted\nagain\n"
        )
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        assert pause_layers(server, sid) == []


def test_a_pause_to_disk_is_refused_as_a_pause_is(server: Sandboxd) -> None:
    with server.client() as api:
        sid = create(api)["sandboxID"]
        assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
        again = api.post(f"/sandboxes/{sid}/pause", json=FS)
        assert again.status_code == 409
        message = f"Error pausing sandbox - sandbox '{sid}' is already paused"
        assert again.json() == {"code": 409, "message": message}
        assert api.post(f"/sandboxes/{sid}/pause").status_code == 409
        assert api.post(f"/sandboxes/{sid}/timeout", json={"timeout": 30}).status_code == 404
        assert api.post(f"/sandboxes/{sid}/resume", json={"timeout": 0}).status_code == 400
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        gone = api.post(f"/sandboxes/{sid}/pause", json=FS)
        assert gone.status_code == 404
        assert api.post(f"/sandboxes/{sid}/pause", json={"memory": "no"}).status_code == 400


def test_connect_without_memory_boots_a_frozen_sandbox_from_its_files(server: Sandboxd) -> None:
    with server.client() as api:
        sandbox = create(api)
        sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
        sh(server, sid, "echo kept > /home/user/marker", token)
        boot_before = sh(server, sid, BOOT_ID, token)
        assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
        assert api.get(f"/sandboxes/{sid}").json()["pauseMode"] == "full"
        resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60, "memory": False})
        assert resumed.status_code == 201, resumed.text
        assert sh(server, sid, "cat /home/user/marker", token) == "kept\n"
        assert sh(server, sid, BOOT_ID, token) != boot_before
        # On a running sandbox `memory` is ignored, as the reference does.
        again = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60, "memory": False})
        assert again.status_code == 200
        assert sh(server, sid, BOOT_ID, token) != boot_before
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def test_a_full_pause_writes_its_files_to_a_pause_layer_that_its_thaw_deletes(
    server: Sandboxd,
) -> None:
    with server.client() as api:
        sid, token = prepared(server, api, "frozen")
        sleepers, boot_before = sh(server, sid, SLEEPERS, token), sh(server, sid, BOOT_ID, token)
        assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
        assert api.get(f"/sandboxes/{sid}").json()["pauseMode"] == "full"
        (layer,) = pause_layers(server, sid)
        written = server.state_dir / "layers" / layer / "home" / "user" / "marker"
        assert written.read_text() == "frozen\n"
        with server.held_until_resumed(sid):  # frozen as before: processes and memory kept
            assert api.post(f"/sandboxes/{sid}/resume", json={"timeout": 60}).status_code == 201
        assert pause_layers(server, sid) == []  # the files are the running sandbox's again
        assert sh(server, sid, SLEEPERS, token) == sleepers
        assert sh(server, sid, BOOT_ID, token) == boot_before
        # A full pause's connect without memory boots from the layer the pause wrote.
        sh(server, sid, "echo later > /home/user/second", token)
        assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
        assert len(pause_layers(server, sid)) == 1
        resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60, "memory": False})
        assert resumed.status_code == 201, resumed.text
        assert sh(server, sid, "cat /home/user/marker /home/user/second", token) == (
            "frozen\nlater\n"
        )
        assert sh(server, sid, BOOT_ID, token) != boot_before
        assert len(pause_layers(server, sid)) == 1  # what it booted from
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        assert pause_layers(server, sid) == []


def test_a_restarted_serve_resumes_a_sandbox_paused_to_disk_and_collection_keeps_its_layer(
    tmp_path: Path, base_template: Path
) -> None:
    state = tmp_path / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as server:
        with server.client() as api:
            sandbox = create(api)
            sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
            killed = create(api)["sandboxID"]
            sh(server, sid, "echo persisted > /home/user/marker", token)
            for paused in (sid, killed):
                assert api.post(f"/sandboxes/{paused}/pause", json=FS).status_code == 204
        server.stop()
        assert collected(state) == []  # the rows of both keep their layers
        server.start()
        with server.client() as api:
            info = api.get(f"/sandboxes/{sid}").json()
            assert (info["state"], info["pauseMode"]) == ("paused", "filesystem")
            assert api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
            assert sh(server, sid, "cat /home/user/marker", token) == "persisted\n"
            assert api.delete(f"/sandboxes/{killed}").status_code == 204
            assert pause_layers(server, killed) == []
        server.stop()
        assert collected(state) == []  # the running one's record keeps its stack
        server.start()
        with server.client() as api:
            assert api.delete(f"/sandboxes/{sid}").status_code == 204
        server.stop()
    assert [p.name for p in (state / "layers").iterdir() if p.name.startswith("pause-")] == []


def collected(state: Path) -> list[str]:
    """The layers the one collection rule removes, serve stopped."""
    store = SqliteStore(state)
    try:
        return collect(LayerStore(state / "layers"), layer_users(store, state / "sandboxes", state))
    finally:
        store.close()
