"""The volume control API over the wire (a real `sandboxd serve`): create, list, get, delete,
every refusal with its message, sizes, tokens, and a delete that leaves nothing on the host."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.sandboxd.serving import NO_NETWORK, Sandboxd, running_sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("volumes") / "state"
    flags = (NO_NETWORK, "--volume-size-mb", "32", "--volume-max-size-mb", "64")
    with running_sandboxd(state, base_template, *flags) as s:
        yield s


@pytest.fixture
def api(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def created(api: httpx.Client, name: str, **extra: object) -> dict[str, str]:
    response = api.post("/volumes", json={"name": name, **extra})
    assert response.status_code == 201, response.text
    body: dict[str, str] = response.json()
    return body


def refusal(response: httpx.Response, status: int, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.json() == {"code": status, "message": message}


def on_host(server: Sandboxd, volume_id: str) -> list[str]:
    """What of the volume is on the host: its image, its mount point, a mount, a loop device."""
    root = server.state_dir / "volumes"
    left = [str(p) for p in (root / f"{volume_id}.img", root / volume_id) if p.exists()]
    if str(root / volume_id) in Path("/proc/self/mountinfo").read_text():
        left.append("a mount")
    loops = subprocess.run(["losetup", "--noheadings", "--list", "--output", "BACK-FILE"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    left += [f"loop device of {line}" for line in loops.split() if volume_id in line]
    return left


def test_create_list_get_delete(server: Sandboxd, api: httpx.Client) -> None:
    made = created(api, "data_set-1")
    volume_id = made["volumeID"]
    assert uuid.UUID(volume_id).version == 4
    assert made["name"] == "data_set-1"
    assert made["token"]
    assert {"volumeID": volume_id, "name": "data_set-1"} in api.get("/volumes").json()
    got = api.get(f"/volumes/{volume_id}")
    assert got.status_code == 200
    assert got.json()["volumeID"] == volume_id
    assert got.json()["name"] == "data_set-1"
    assert got.json()["token"]
    # A filesystem of its own, of the default size, mounted and owned by `user` (uid 1000).
    mount_point = server.state_dir / "volumes" / volume_id
    assert os.path.ismount(mount_point)
    fs = os.statvfs(mount_point)
    assert 24 << 20 < fs.f_blocks * fs.f_frsize <= 32 << 20
    assert (os.stat(mount_point).st_uid, os.stat(mount_point).st_gid) == (1000, 1000)
    assert os.listdir(mount_point) == []
    # The image is sparse: it holds far less than its size.
    assert os.stat(server.state_dir / "volumes" / f"{volume_id}.img").st_blocks * 512 < 16 << 20

    assert api.delete(f"/volumes/{volume_id}").status_code == 204
    assert on_host(server, volume_id) == []
    refusal(api.get(f"/volumes/{volume_id}"), 404, "Volume not found")
    refusal(api.delete(f"/volumes/{volume_id}"), 404, "Volume not found")
    assert all(v["volumeID"] != volume_id for v in api.get("/volumes").json())


def test_refusals(api: httpx.Client) -> None:
    for bad in ("", "with space", "dot.name", "slash/name", "ünï"):
        refusal(api.post("/volumes", json={"name": bad}), 400, "Invalid volume name")
    refusal(api.post("/volumes", json={}), 400, "validation error: name: Field required")
    refusal(
        api.post("/volumes", content=b"nope"), 400, "validation error: the body is not valid JSON"
    )
    made = created(api, "taken")
    refusal(
        api.post("/volumes", json={"name": "taken"}), 400, "Volume with name 'taken' already exists"
    )
    for path in ("/volumes/not-a-uuid", "/volumes/123"):
        refusal(api.get(path), 400, "Invalid volume ID")
        refusal(api.delete(path), 400, "Invalid volume ID")
    refusal(api.get(f"/volumes/{uuid.uuid4()}"), 404, "Volume not found")
    refusal(api.delete(f"/volumes/{uuid.uuid4()}"), 404, "Volume not found")
    assert api.delete(f"/volumes/{made['volumeID']}").status_code == 204


def test_sizes(server: Sandboxd, api: httpx.Client) -> None:
    made = created(api, "bigger", sizeMB=64)
    fs = os.statvfs(server.state_dir / "volumes" / made["volumeID"])
    assert 48 << 20 < fs.f_blocks * fs.f_frsize <= 64 << 20
    message = "volume size must be between 16 and 64 MiB"
    refusal(api.post("/volumes", json={"name": "huge", "sizeMB": 65}), 400, message)
    refusal(api.post("/volumes", json={"name": "tiny", "sizeMB": 8}), 400, message)
    assert api.get("/volumes").json().count({"volumeID": made["volumeID"], "name": "bigger"}) == 1
    assert all(v["name"] not in ("huge", "tiny") for v in api.get("/volumes").json())
    assert api.delete(f"/volumes/{made['volumeID']}").status_code == 204


def test_without_api_key(server: Sandboxd) -> None:
    for method, path in (("GET", "/volumes"), ("POST", "/volumes"),
                         ("GET", f"/volumes/{uuid.uuid4()}")):  # fmt: skip
        response = httpx.request(method, server.url + path, json={"name": "x"})
        refusal(response, 401, "Missing API key (X-API-Key header)")


def test_fresh_token_on_every_get(api: httpx.Client) -> None:
    made = created(api, "tokens")
    first = api.get(f"/volumes/{made['volumeID']}").json()["token"]
    other = created(api, "tokens-other")
    assert made["volumeID"] in first
    assert made["volumeID"] not in other["token"]
    for volume in (made, other):
        assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_volumes_survive_a_restart(tmp_path: Path, base_template: Path) -> None:
    """A volume's files outlive serve's stop and a lost mount (a host reboot): the next start
    mounts it again; a stray image (a create cut short) is removed."""
    flags = (NO_NETWORK, "--volume-size-mb", "16")
    with running_sandboxd(tmp_path / "state", base_template, *flags) as server:
        with server.client() as api:
            volume_id = created(api, "kept")["volumeID"]
        mount_point = server.state_dir / "volumes" / volume_id
        (mount_point / "marker").write_text("kept")
        server.stop()
        assert os.path.ismount(mount_point)  # left for the sandboxes still running
        subprocess.run(["umount", str(mount_point)], check=True)  # as a reboot would
        stray = server.state_dir / "volumes" / f"{uuid.uuid4()}.img"
        stray.write_bytes(b"")
        server.start()
        assert (mount_point / "marker").read_text() == "kept"
        assert not stray.exists()
        with server.client() as api:
            assert api.get(f"/volumes/{volume_id}").json()["name"] == "kept"
            assert api.delete(f"/volumes/{volume_id}").status_code == 204
        assert on_host(server, volume_id) == []
