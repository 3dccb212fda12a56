"""Snapshots over the wire (`POST /sandboxes/{id}/snapshots`, `GET /snapshots`, `DELETE
/templates/{snapshotID}`, a create from a snapshot id): the source runs on with its id, end and
processes; its children boot its files cold and diverge; a snapshot of a child stacks; names,
tags, paging and filters; the refusals in the reference's words; a restart of serve keeps them;
their layers are collected once nothing uses them; `sandboxd template ls` shows them."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest

from tests.sandboxd.guest_shell import background, sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.sandboxd.test_disk_pause import BOOT_ID, collected
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

NOT_FOUND = "Sandbox \"{}\" doesn't exist or you don't have access to it"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("snapshots"), base_template, NO_NETWORK) as s:
        yield s


def create(api: httpx.Client, template: str = "base", **body: object) -> dict[str, str]:
    answer = api.post("/v2/sandboxes", json={"templateID": template, "timeout": 300, **body})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def snapshot(api: httpx.Client, sandbox_id: str, **body: object) -> dict[str, object]:
    answer = api.post(f"/sandboxes/{sandbox_id}/snapshots", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def delete(api: httpx.Client, snapshot_id: str) -> httpx.Response:
    """As the SDKs delete one: the id percent-encoded as one path segment."""
    return api.delete(f"/templates/{quote(snapshot_id, safe='')}")


def snapshot_layers(server: Sandboxd) -> list[str]:
    return sorted(p.name for p in (server.state_dir / "layers").glob("snapshot-*"))


def listed(api: httpx.Client, **query: str | int) -> list[str]:
    answer = api.get("/snapshots", params=query)
    assert answer.status_code == 200, answer.text
    return [s["snapshotID"] for s in answer.json()]


def paged(api: httpx.Client, limit: int) -> list[list[str]]:
    """Every page of `GET /snapshots?limit=`, following `X-Next-Token`."""
    pages, token = [], None
    while True:
        query = {"limit": limit} | ({"nextToken": token} if token else {})
        answer = api.get("/snapshots", params=query)
        assert answer.status_code == 200, answer.text
        pages.append([s["snapshotID"] for s in answer.json()])
        token = answer.headers.get("X-Next-Token")
        if token is None:
            return pages


def ids(sandbox: dict[str, str]) -> tuple[str, str]:
    return sandbox["sandboxID"], sandbox["envdAccessToken"]


def test_the_source_runs_on_and_a_child_boots_its_files_cold(server: Sandboxd) -> None:
    with server.client() as api:
        sid, token = ids(create(api, envVars={"FROM_SOURCE": "kept"}))
        sh(server, sid, "echo original > /home/user/data", token)
        background(server, sid, "sleep 3600", token)
        sleeper = sh(server, sid, "pgrep -x sleep", token)
        boot = sh(server, sid, BOOT_ID, token)
        before = api.get(f"/sandboxes/{sid}").json()
        taken = snapshot(api, sid)
        snapshot_id = str(taken["snapshotID"])
        assert snapshot_id.endswith(":default")
        assert taken["names"] == []
        after = api.get(f"/sandboxes/{sid}").json()
        assert (after["state"], after["endAt"]) == ("running", before["endAt"])
        assert sh(server, sid, "pgrep -x sleep", token) == sleeper  # the same process, alive
        assert sh(server, sid, BOOT_ID, token) == boot

        child = create(api, snapshot_id, envVars={"FROM_CHILD": "given"}, metadata={"n": "1"})
        cid, ctoken = ids(child)
        assert (cid, ctoken) != (sid, token)
        assert child["templateID"] == snapshot_id.removesuffix(":default")
        assert api.get(f"/sandboxes/{cid}").json()["metadata"] == {"n": "1"}
        assert sh(server, cid, "cat /home/user/data", ctoken) == "original\n"
        assert sh(server, cid, BOOT_ID, ctoken) != boot  # a cold boot of the files
        assert sh(server, cid, "pgrep -x sleep || true", ctoken) == ""
        assert sh(server, cid, 'echo "$FROM_SOURCE $FROM_CHILD"', ctoken) == "kept given\n"
        for sandbox_id in (cid, sid):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        assert delete(api, snapshot_id).status_code == 204
        assert snapshot_layers(server) == []


def test_children_diverge_a_snapshot_of_one_stacks_and_deletion_waits_for_them(
    server: Sandboxd,
) -> None:
    with server.client() as api:
        sid, token = ids(create(api))
        sh(server, sid, "echo original > /home/user/data", token)
        snapshot_id = str(snapshot(api, sid)["snapshotID"])
        (c1, t1), (c2, t2) = ids(create(api, snapshot_id)), ids(create(api, snapshot_id))
        sh(server, c1, "echo changed > /home/user/data", t1)
        assert sh(server, c2, "cat /home/user/data", t2) == "original\n"
        assert sh(server, sid, "cat /home/user/data", token) == "original\n"
        stacked = str(snapshot(api, c1)["snapshotID"])  # the first one's layers and c1's
        refused = delete(api, snapshot_id)
        template_id = snapshot_id.removesuffix(":default")
        message = f"template '{template_id}' is used by sandboxes"
        assert refused.json() == {"code": 400, "message": message}
        for sandbox_id in (c1, c2):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        assert delete(api, snapshot_id).status_code == 204
        assert delete(api, snapshot_id).status_code == 404
        assert api.post("/v2/sandboxes", json={"templateID": snapshot_id}).status_code == 404
        assert len(snapshot_layers(server)) == 2  # the stacked one's build keeps both
        gid, gtoken = ids(create(api, stacked))
        assert sh(server, gid, "cat /home/user/data", gtoken) == "changed\n"
        for sandbox_id in (gid, sid):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        assert delete(api, stacked).status_code == 204
        assert snapshot_layers(server) == []


def test_names_tags_paging_and_filters(server: Sandboxd) -> None:
    with server.client() as api:
        source = create(api)["sandboxID"]
        other = create(api)["sandboxID"]
        named = snapshot(api, source, name=" Snap-A ")
        assert named == {"snapshotID": "snap-a:default", "names": ["snap-a"]}
        tagged = snapshot(api, source, name="sandboxd/snap-b:V1", memory=False)
        assert tagged == {"snapshotID": "snap-b:v1", "names": ["snap-b"]}
        retagged = snapshot(api, other, name="snap-a:v2", memory=True)  # the same template
        assert retagged == {"snapshotID": "snap-a:v2", "names": ["snap-a"]}
        unnamed = str(snapshot(api, other)["snapshotID"])

        everything = listed(api)
        assert everything == [unnamed, "snap-b:v1", "snap-a:v2"]  # newest template first
        assert paged(api, 1) == [[unnamed], ["snap-b:v1"], ["snap-a:v2"]]
        assert paged(api, 2) == [[unnamed, "snap-b:v1"], ["snap-a:v2"]]
        assert paged(api, 3) == [everything]  # no X-Next-Token when nothing more follows

        assert listed(api, sandboxID=source) == ["snap-b:v1", "snap-a:v2"]
        assert listed(api, sandboxID=other) == [unnamed, "snap-a:v2"]
        assert listed(api, sandboxID="inosuchsandbox") == []
        assert listed(api, name="snap-a") == ["snap-a:v2"]
        assert listed(api, name="snap-a:default") == ["snap-a:default"]
        assert listed(api, name="sandboxd/snap-b") == ["snap-b:v1"]
        assert listed(api, name="snap-c") == []
        assert listed(api, limit=0) == everything
        assert listed(api, limit=500) == everything
        bad = api.get("/snapshots", params={"nextToken": "not-a-token"})
        assert bad.json() == {"code": 400, "message": "Invalid next token"}

        child = create(api, "snap-b:v1")  # a name and tag resolve as a template's do
        assert child["templateID"] != "base"
        assert api.delete(f"/sandboxes/{child['sandboxID']}").status_code == 204
        for made in ("snap-a:default", "snap-b:v1", unnamed):
            assert delete(api, made).status_code == 204
        assert listed(api) == []
        for sandbox_id in (source, other):
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_refusals_say_why(server: Sandboxd) -> None:
    with server.client() as api:
        sid = create(api)["sandboxID"]
        path = f"/sandboxes/{sid}/snapshots"
        assert api.post(path).status_code == 400  # the body is required
        assert api.post(path, json={"memory": "no"}).status_code == 400
        for name, message in (
            ("Bad Name!", "Invalid name: alias 'bad name!' must match ^[a-z0-9_-]+$"),
            ("ok:bad tag", "Invalid name: tag 'bad tag' must match ^[a-z0-9_.-]+$"),
            ("", "Invalid name: alias '' must match ^[a-z0-9_-]+$"),
            ("other/x", "namespace 'other' must match your team 'sandboxd'"),
            ("base", "Invalid name: the base template is sandboxd's own"),
        ):
            answer = api.post(path, json={"name": name})
            assert answer.json() == {"code": 400, "message": message}, name
        unknown = "i" + "0" * 19
        for gone in (unknown, sid):
            if gone == sid:
                assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
            answer = api.post(f"/sandboxes/{gone}/snapshots", json={})
            assert answer.json() == {"code": 404, "message": NOT_FOUND.format(gone)}
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        assert api.post(path, json={}).status_code == 404
        assert api.get("/snapshots").json() == []  # nothing was left of the refused ones
        assert snapshot_layers(server) == []


def test_a_sandbox_being_paused_is_refused_a_409(server: Sandboxd) -> None:
    """Listed paused from the pause's start, while its files are exported: the snapshot call
    made then is refused. 128 MiB make the export long; a pause that still ended before the
    call was answered (a 404: paused) is undone and tried again, until the call meets one."""
    with server.client() as api, ThreadPoolExecutor(1) as pausing:
        source = create(api)
        sid, token = source["sandboxID"], source["envdAccessToken"]
        sh(server, sid, "head -c 134217728 /dev/zero > /home/user/big", token)

        def pause_to_disk() -> int:
            with server.client() as own:  # a client of its own, in its own thread
                return own.post(f"/sandboxes/{sid}/pause", json={"memory": False}).status_code

        message = f"Sandbox '{sid}' cannot be snapshotted while in 'pausing' state"
        while True:
            pause = pausing.submit(pause_to_disk)
            wait_until(lambda: api.get(f"/sandboxes/{sid}").json()["state"] == "paused", 30,
                       "the pause to start")  # fmt: skip
            refused = api.post(f"/sandboxes/{sid}/snapshots", json={})
            assert pause.result() == 204
            if refused.status_code != 404:
                break
            assert api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
        assert refused.json() == {"code": 409, "message": message}
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def test_snapshots_survive_a_restart_are_listed_by_the_command_line_and_are_collected(
    tmp_path: Path, base_template: Path
) -> None:
    state = tmp_path / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as server:
        with server.client() as api:
            source = create(api)
            sid, token = source["sandboxID"], source["envdAccessToken"]
            # Resumed from disk: the snapshot stacks its pause layer, which outlives its kill.
            sh(server, sid, "echo before > /home/user/paused", token)
            assert api.post(f"/sandboxes/{sid}/pause", json={"memory": False}).status_code == 204
            assert api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
            sh(server, sid, "head -c 1048576 /dev/urandom > /home/user/blob", token)
            digest = sh(server, sid, "sha256sum < /home/user/blob", token)
            snapshot_id = str(snapshot(api, sid, name="kept")["snapshotID"])
            assert api.delete(f"/sandboxes/{sid}").status_code == 204
        server.stop()
        assert collected(state) == []
        listing = _cli(state, "template", "ls")
        line = next(x for x in listing.stdout.splitlines() if x.startswith(snapshot_id))
        assert sid in line
        assert float(line.split()[-2]) >= 1.0  # MiB: the blob, in its own layer
        server.start()
        with server.client() as api:
            assert [s["snapshotID"] for s in api.get("/snapshots").json()] == [snapshot_id]
            child = create(api, snapshot_id)
            files = "cat /home/user/paused && sha256sum < /home/user/blob"
            assert sh(server, child["sandboxID"], files, child["envdAccessToken"]) == (
                f"before\n{digest}"
            )
            assert api.delete(f"/sandboxes/{child['sandboxID']}").status_code == 204
            assert delete(api, snapshot_id).status_code == 204
            assert snapshot_layers(server) == []
            assert not any(p.name.startswith(f"pause-{sid}-") for p in (state / "layers").iterdir())


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sandboxd", *args, "--state-dir", str(state)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done
