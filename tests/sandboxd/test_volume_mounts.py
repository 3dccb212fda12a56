"""Volumes mounted in sandboxes over the wire (a real `sandboxd serve`, `volumeMounts` at
create): one volume in two sandboxes at once, each seeing the other's writes with root's and
`user`'s files owned right inside both and canonical ids on the host; the volume outliving both
and in use (not deleted) while any sandbox has it; every refusal of a create's mounts in one
400; the mounts again after a resume from a pause to disk (or a frozen one's boot from its
files) and after serve's restart; and a link the sandbox plants at its mount path, which leads
the next boot's mount nowhere out of it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sandboxd.host.removal import mounts_under
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator

    import httpx

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

FS = {"memory": False}
OWNERS = "stat -c '%n %U %u' {0}/by-root {0}/by-user"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("volume-mounts") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK, "--volume-size-mb", "32") as s:
        yield s


@pytest.fixture
def api(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def new_volume(api: httpx.Client) -> dict[str, str]:
    answer = api.post("/volumes", json={"name": f"vol-{uuid.uuid4().hex[:8]}"})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def create(api: httpx.Client, mounts: list[dict[str, str]]) -> dict[str, Any]:
    body = {"templateID": "base", "secure": True, "timeout": 300, "volumeMounts": mounts}
    answer = api.post("/v2/sandboxes", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def on_host(server: Sandboxd, volume: dict[str, str]) -> Path:
    return server.state_dir / "volumes" / volume["volumeID"]


def owners(server: Sandboxd, sandbox: dict[str, Any], where: str) -> set[str]:
    """How root and `user` in the sandbox see the owners of by-root and by-user in `where`."""
    seen = set()
    for user in ("root", "user"):
        out = server.sh(
            sandbox["sandboxID"], OWNERS.format(where), sandbox["envdAccessToken"], user
        )
        seen.add(out)
    assert len(seen) == 1, seen
    return set(seen.pop().splitlines())


def test_one_volume_in_two_sandboxes_and_after_them(server: Sandboxd, api: httpx.Client) -> None:
    volume = new_volume(api)
    name = volume["name"]
    a = create(api, [{"name": name, "path": "/mnt/data"}])
    b = create(api, [{"name": name, "path": "/home/user/data"}])
    for sandbox, path in ((a, "/mnt/data"), (b, "/home/user/data")):
        info = api.get(f"/sandboxes/{sandbox['sandboxID']}").json()
        assert info["volumeMounts"] == [{"name": name, "path": path}]
    listed = {s["sandboxID"]: s for s in api.get("/v2/sandboxes").json()}
    assert listed[a["sandboxID"]]["volumeMounts"] == [{"name": name, "path": "/mnt/data"}]

    sh = server.sh
    sh(a["sandboxID"], "echo from-a > /mnt/data/by-root", a["envdAccessToken"])
    sh(b["sandboxID"], "echo from-b > ~/data/by-user", b["envdAccessToken"], "user")
    assert sh(b["sandboxID"], "cat ~/data/by-root", b["envdAccessToken"], "user") == "from-a\n"
    assert sh(a["sandboxID"], "cat /mnt/data/by-user", a["envdAccessToken"]) == "from-b\n"
    assert owners(server, a, "/mnt/data") == {
        "/mnt/data/by-root root 0", "/mnt/data/by-user user 1000"}  # fmt: skip
    assert owners(server, b, "/home/user/data") == {
        "/home/user/data/by-root root 0", "/home/user/data/by-user user 1000"}  # fmt: skip
    # The host keeps the ids the files have inside, not either sandbox's range.
    stored = on_host(server, volume)
    assert [os.stat(stored / f).st_uid for f in ("by-root", "by-user")] == [0, 1000]

    refused = api.delete(f"/volumes/{volume['volumeID']}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["message"] == f"Volume '{name}' is mounted in a sandbox"
    for sandbox in (a, b):
        assert api.delete(f"/sandboxes/{sandbox['sandboxID']}").status_code == 204
        assert server.traces(sandbox["sandboxID"]) == []
    assert (stored / "by-user").read_text() == "from-b\n"
    c = create(api, [{"name": name, "path": "/data"}])
    assert sh(c["sandboxID"], "cat /data/by-root /data/by-user", c["envdAccessToken"]) == (
        "from-a\nfrom-b\n"
    )
    assert api.delete(f"/sandboxes/{c['sandboxID']}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_every_bad_mount_in_one_refusal(api: httpx.Client) -> None:
    name = new_volume(api)["name"]
    mounts = [
        {"name": "no-such-volume", "path": "/a"},
        {"name": name, "path": "relative/path"},
        {"name": name, "path": "/mnt/../etc"},
        {"name": name, "path": "/mnt/data"},
        {"name": name, "path": "/mnt/data"},
        {"name": name, "path": ""},
        {"name": name, "path": "/mnt/./x"},
        {"name": name, "path": "/"},
        {"name": "no-such-volume", "path": "relative"},
    ]
    before = api.get("/v2/sandboxes").json()
    answer = api.post("/v2/sandboxes", json={"templateID": "base", "volumeMounts": mounts})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"code": 400, "message": (
        "invalid mounts:\n"
        "\t- volume mount #0: volume 'no-such-volume' not found\n"
        "\t- volume mount #1: path must be absolute\n"
        "\t- volume mount #2: path must not contain any '.' or '..' components\n"
        "\t- volume mount #4: path '/mnt/data' is already used\n"
        "\t- volume mount #5: path cannot be empty\n"
        "\t- volume mount #6: path must not contain any '.' or '..' components\n"
        "\t- volume mount #7: path cannot be the root directory\n"
        "\t- volume mount #8: volume 'no-such-volume' not found"
    )}  # fmt: skip
    assert api.get("/v2/sandboxes").json() == before
    without = create(api, [])
    assert api.get(f"/sandboxes/{without['sandboxID']}").json()["volumeMounts"] == []
    assert api.delete(f"/sandboxes/{without['sandboxID']}").status_code == 204


def test_mounted_again_after_a_pause_to_disk(server: Sandboxd, api: httpx.Client) -> None:
    volume = new_volume(api)
    sandbox = create(api, [{"name": volume["name"], "path": "/mnt/data"}])
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    server.sh(sid, "echo one > /mnt/data/first", token, "user")
    assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
    assert server.traces(sid) == []
    # Paused to disk, it still has the volume: not deleted under it.
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 409
    (on_host(server, volume) / "from-host").write_text("written meanwhile\n")
    assert api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
    assert server.sh(sid, "cat /mnt/data/first /mnt/data/from-host", token, "user") == (
        "one\nwritten meanwhile\n"
    )
    # Frozen, then connected with `memory: false`: to disk and booted, the volume with it.
    assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
    connected = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60, "memory": False})
    assert connected.status_code == 201, connected.text
    assert server.sh(sid, "cat /mnt/data/first", token) == "one\n"
    assert api.delete(f"/sandboxes/{sid}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_a_forks_children_share_the_parents_volumes(server: Sandboxd, api: httpx.Client) -> None:
    """A fork's child mounts the parent's volumes (shared, not copied): the parent sees its
    write, and the volume is in use while the child has it."""
    volume = new_volume(api)
    parent = create(api, [{"name": volume["name"], "path": "/mnt/data"}])
    pid, parent_token = parent["sandboxID"], parent["envdAccessToken"]
    server.sh(pid, "echo from-parent > /mnt/data/parent", parent_token, "user")
    forked = api.post(f"/sandboxes/{pid}/fork", json={"timeout": 60})
    assert forked.status_code == 201, forked.text
    [entry] = forked.json()
    child = entry["sandbox"]
    cid, child_token = child["sandboxID"], child["envdAccessToken"]
    assert server.sh(cid, "cat /mnt/data/parent", child_token, "user") == "from-parent\n"
    server.sh(cid, "echo from-child > /mnt/data/child", child_token, "user")
    assert server.sh(pid, "cat /mnt/data/child", parent_token, "user") == "from-child\n"
    assert api.get(f"/sandboxes/{cid}").json()["volumeMounts"] == [
        {"name": volume["name"], "path": "/mnt/data"}
    ]
    assert api.delete(f"/sandboxes/{pid}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 409  # the child has it
    assert api.delete(f"/sandboxes/{cid}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


@pytest.mark.timeout(600)  # two restarts of serve and two boots, on a busy machine
def test_mounted_again_after_a_restart(server: Sandboxd, api: httpx.Client) -> None:
    """A restart adopts a running sandbox with its mount; one paused to disk across a restart
    boots with it again. (Each start serves on a port of its own: a client for each.)"""
    volume = new_volume(api)
    sandbox = create(api, [{"name": volume["name"], "path": "/mnt/data"}])
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    server.stop()
    server.start()
    server.sh(sid, "echo two > /mnt/data/second", token, "user")
    assert (on_host(server, volume) / "second").read_text() == "two\n"
    with server.client() as after:
        assert after.delete(f"/volumes/{volume['volumeID']}").status_code == 409
        assert after.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
    server.stop()
    server.start()
    with server.client() as after:
        assert after.delete(f"/volumes/{volume['volumeID']}").status_code == 409
        assert after.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
        assert server.sh(sid, "cat /mnt/data/second && stat -c %U /mnt/data/second", token) == (
            "two\nuser\n"
        )
        assert after.get(f"/sandboxes/{sid}").json()["volumeMounts"] == [
            {"name": volume["name"], "path": "/mnt/data"}
        ]
        assert after.delete(f"/sandboxes/{sid}").status_code == 204
        assert after.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_a_link_planted_at_the_mount_path_leads_nowhere_out(
    server: Sandboxd, api: httpx.Client
) -> None:
    """The sandbox moves its mount point's parent away and puts a link to a host path in its
    place; its resume from disk resolves the path inside its own root, never on the host."""
    volume = new_volume(api)
    (on_host(server, volume) / "marker").write_text("volume\n")
    target = Path("/srv") / f"volume-probe-{uuid.uuid4().hex[:8]}"  # absent on the host
    sandbox = create(api, [{"name": volume["name"], "path": "/mnt/evil/data"}])
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    server.sh(sid, f"mv /mnt/evil /mnt/moved && ln -s {target} /mnt/evil", token)
    assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
    assert api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
    assert server.sh(sid, f"cat /mnt/evil/data/marker {target}/data/marker", token) == (
        "volume\n" * 2
    )
    assert not target.exists()
    assert mounts_under(target) == []
    in_root = server.box_dir(sid) / "root" / target.relative_to("/") / "data"
    assert str(in_root) in mounts_under(server.box_dir(sid))
    assert api.delete(f"/sandboxes/{sid}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_a_full_volume_is_enospc_inside_and_nothing_more_on_the_host(
    server: Sandboxd, api: httpx.Client
) -> None:
    """A sandbox writing past its volume's size gets ENOSPC; the volume's image on the host
    keeps its size (the host's disk gives it no more), and the volume still serves."""
    answer = api.post("/volumes", json={"name": f"small-{uuid.uuid4().hex[:8]}", "sizeMB": 16})
    assert answer.status_code == 201, answer.text
    volume = answer.json()
    image = server.state_dir / "volumes" / f"{volume['volumeID']}.img"
    sandbox = create(api, [{"name": volume["name"], "path": "/mnt/small"}])
    sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
    fill = "dd if=/dev/zero of=/mnt/small/fill bs=1M count=64 2>/tmp/dd.err; echo status $?"
    out = server.sh(sid, f"{fill}; cat /tmp/dd.err", token, "user")
    assert "No space left on device" in out, out
    assert "status 1" in out, out
    assert image.stat().st_size == 16 << 20
    assert image.stat().st_blocks * 512 <= 16 << 20
    assert server.sh(sid, "rm /mnt/small/fill && echo freed > /mnt/small/after && cat /mnt/small/after",
                     token, "user") == "freed\n"  # fmt: skip
    assert api.delete(f"/sandboxes/{sid}").status_code == 204
    assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204
