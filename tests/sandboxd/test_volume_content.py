"""The volume-content API over the wire (a real `sandboxd serve`): every route with its
semantics and refusals, tokens, streaming, a full volume, and hostile trees planted directly in
a volume's host directory (as a sandbox that mounts it could write them) that never lead the
API out of the volume."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sandboxd.lifecycle.tokens import Tokens
from sandboxd.volumes.tokens import VolumeTokens
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.root


BODY_DEADLINE_S = 0.5  # the port's, shortened: a volume upload must outlast it


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("content") / "state"
    served = Sandboxd(state, base_template, NO_NETWORK, "--volume-size-mb", "160")
    served.env["SANDBOXD_BODY_TIMEOUT_S"] = str(BODY_DEADLINE_S)
    try:
        served.start()
        yield served
    finally:
        served.clean_up()


class Content:
    """One volume's content API, as the SDKs call it."""

    def __init__(self, server: Sandboxd, name: str, **extra: object) -> None:
        with server.client() as api:
            made = api.post("/volumes", json={"name": name, **extra}).json()
        self.id, self.token = made["volumeID"], made["token"]
        self.root = server.state_dir / "volumes" / self.id  # the host's view of its files
        self.http = httpx.Client(base_url=f"{server.url}/volumecontent/{self.id}", timeout=60,
                                 headers={"Authorization": f"Bearer {self.token}"})  # fmt: skip

    def call(self, method: str, route: str, path: str, **kwargs: Any) -> httpx.Response:
        query = {"path": path, **kwargs.pop("params", {})}
        return self.http.request(method, f"/{route}", params=query, **kwargs)

    def write(self, path: str, data: bytes, **query: object) -> httpx.Response:
        params = {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
        headers = {"Content-Type": "application/octet-stream"}
        return self.call("PUT", "file", path, content=data, params=params, headers=headers)


@pytest.fixture
def volume(server: Sandboxd) -> Iterator[Content]:
    content = Content(server, f"v{os.urandom(4).hex()}")
    yield content
    content.http.close()
    with server.client() as api:
        assert api.delete(f"/volumes/{content.id}").status_code == 204


def refused(response: httpx.Response, status: int, code: str, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.json() == {"code": code, "message": message}


def test_write_read_stat(volume: Content) -> None:
    made = volume.write("/hello.txt", b"hello")
    assert made.status_code == 201, made.text
    info = made.json()
    assert info["name"] == "hello.txt"
    assert info["path"] == "/hello.txt"
    assert (info["type"], info["size"], info["mode"], info["uid"], info["gid"]) == (
        "file", 5, 0o644, 1000, 1000)  # fmt: skip
    assert "target" not in info
    for key in ("atime", "mtime", "ctime"):
        assert datetime.fromisoformat(info[key]).tzinfo is not None
    assert volume.call("GET", "file", "/hello.txt").content == b"hello"
    assert volume.call("GET", "path", "hello.txt").json() == volume.call(
        "GET", "path", "/hello.txt").json()  # fmt: skip
    on_disk = os.stat(volume.root / "hello.txt")
    assert (on_disk.st_uid, stat.S_IMODE(on_disk.st_mode)) == (1000, 0o644)
    root = volume.call("GET", "path", "/").json()
    assert (root["type"], root["path"], root["uid"]) == ("directory", "/", 1000)

    refused(volume.write("/hello.txt", b"again"), 409, "conflict",
            "path '/hello.txt' already exists")  # fmt: skip
    assert volume.call("GET", "file", "/hello.txt").content == b"hello"
    again = volume.write("/hello.txt", b"hi", force=True, mode=0o600, uid=0, gid=5)
    assert again.status_code == 201
    assert (again.json()["size"], again.json()["mode"], again.json()["uid"],
            again.json()["gid"]) == (2, 0o600, 0, 5)  # fmt: skip
    assert volume.call("GET", "file", "/hello.txt").content == b"hi"


def test_parents_and_refused_paths(volume: Content) -> None:
    refused(volume.write("/a/b/c.txt", b"x"), 404, "not_found", "path '/a/b' not found")
    made = volume.write("/a/b/c.txt", b"x", force=True)
    assert made.status_code == 201, made.text
    for parent in ("/a", "/a/b"):
        info = volume.call("GET", "path", parent).json()
        assert (info["type"], info["mode"], info["uid"], info["gid"]) == (
            "directory",
            0o755,
            1000,
            1000,
        )
    refused(volume.write("/a/b/c.txt/d", b"x", force=True), 409, "conflict",
            "path '/a/b/c.txt' already exists")  # fmt: skip
    refused(volume.write("/a/b/c.txt/d", b"x"), 400, "bad_request",
            "path '/a/b/c.txt' goes through something not a directory")  # fmt: skip
    refused(volume.call("GET", "path", "/a/b/c.txt/d"), 400, "bad_request",
            "path '/a/b/c.txt' goes through something not a directory")  # fmt: skip
    refused(volume.write("/a", b"x", force=True), 400, "bad_request", "path '/a' is a directory")
    refused(volume.call("GET", "file", "/a"), 400, "bad_request", "path '/a' is not a regular file")
    refused(volume.call("GET", "file", "/nope"), 404, "not_found", "path '/nope' not found")
    refused(volume.call("GET", "path", "/nope"), 404, "not_found", "path '/nope' not found")
    for bad in ("/../x", "/a/../../x", "a/.."):
        refused(volume.call("GET", "path", bad), 400, "bad_request",
                "path must not contain '..' components")  # fmt: skip
    refused(volume.call("GET", "path", ""), 400, "bad_request", "validation error: path: required")
    refused(volume.http.get("/file"), 400, "bad_request", "validation error: path: required")
    refused(
        volume.write("/", b"x", force=True), 400, "bad_request", "path '/' is the volume's root"
    )
    refused(volume.write("/q", b"x", force="yes"), 400, "bad_request",
            "validation error: force: must be true or false")  # fmt: skip
    refused(volume.write("/q", b"x", uid=70000), 400, "bad_request",
            "validation error: uid: must be between 0 and 65535")  # fmt: skip


def test_make_dir(volume: Content) -> None:
    made = volume.call("POST", "dir", "/d", params={"mode": 0o750, "uid": 0, "gid": 0})
    assert made.status_code == 201, made.text
    assert (made.json()["type"], made.json()["mode"], made.json()["uid"]) == ("directory", 0o750, 0)
    refused(volume.call("POST", "dir", "/d"), 409, "conflict", "path '/d' already exists")
    refused(volume.call("POST", "dir", "/"), 409, "conflict", "path '/' already exists")
    existing = volume.call("POST", "dir", "/d", params={"force": "true"})
    assert existing.status_code == 201
    assert existing.json()["mode"] == 0o750  # an existing directory is left as it is
    refused(volume.call("POST", "dir", "/x/y"), 404, "not_found", "path '/x' not found")
    deep = volume.call("POST", "dir", "/x/y/z", params={"force": "true", "mode": 0o700})
    assert deep.status_code == 201
    assert deep.json()["path"] == "/x/y/z"
    assert volume.call("GET", "path", "/x/y").json()["mode"] == 0o700
    assert volume.write("/f", b"").status_code == 201
    refused(volume.call("POST", "dir", "/f", params={"force": "true"}), 409, "conflict",
            "path '/f' already exists")  # fmt: skip


def test_list(volume: Content) -> None:
    for path in ("/top/a.txt", "/top/sub/b.txt", "/top/sub/deeper/c.txt"):
        assert volume.write(path, b"x", force=True).status_code == 201

    def listed(depth: object = None) -> list[str]:
        query = {} if depth is None else {"depth": depth}
        response = volume.call("GET", "dir", "/top", params=query)
        assert response.status_code == 200, response.text
        return [e["path"] for e in response.json()]

    assert listed() == ["/top/a.txt", "/top/sub"]
    assert listed(0) == listed(-3) == listed(1) == listed()
    assert listed(2) == ["/top/a.txt", "/top/sub", "/top/sub/b.txt", "/top/sub/deeper"]
    assert listed(10) == [*listed(2), "/top/sub/deeper/c.txt"]
    refused(volume.call("GET", "dir", "/top", params={"depth": 11}), 400, "bad_request",
            "depth must be at most 10")  # fmt: skip
    refused(volume.call("GET", "dir", "/none"), 404, "not_found", "path '/none' not found")
    refused(volume.call("GET", "dir", "/top/a.txt"), 404, "not_found",
            "path '/top/a.txt' is not a directory")  # fmt: skip
    names = [e["name"] for e in volume.call("GET", "dir", "/").json()]
    assert names == ["top"]


def test_remove_and_patch(volume: Content) -> None:
    assert volume.write("/tree/x/y.txt", b"y", force=True).status_code == 201
    assert volume.call("DELETE", "path", "/tree").status_code == 204
    refused(volume.call("GET", "path", "/tree"), 404, "not_found", "path '/tree' not found")
    refused(volume.call("DELETE", "path", "/tree"), 404, "not_found", "path '/tree' not found")
    refused(
        volume.call("DELETE", "path", "/"), 400, "bad_request", "cannot remove the volume's root"
    )

    assert volume.write("/m.txt", b"m", mode=0o640).status_code == 201
    patched = volume.call("PATCH", "path", "/m.txt", json={"uid": 1001})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["uid"], patched.json()["gid"], patched.json()["mode"]) == (
        1001,
        1000,
        0o640,
    )
    patched = volume.call("PATCH", "path", "/m.txt", json={"mode": 0o755, "gid": 7})
    assert (patched.json()["uid"], patched.json()["gid"], patched.json()["mode"]) == (
        1001,
        7,
        0o755,
    )
    assert stat.S_IMODE(os.stat(volume.root / "m.txt").st_mode) == 0o755
    refused(volume.call("PATCH", "path", "/none", json={"uid": 1}), 404, "not_found",
            "path '/none' not found")  # fmt: skip
    refused(volume.call("PATCH", "path", "/m.txt", json={"uid": "x"}), 400, "bad_request",
            "validation error: uid: Input should be a valid integer")  # fmt: skip
    refused(volume.call("PATCH", "path", "/m.txt", json={"mode": 0o10000}), 400, "bad_request",
            "mode must be between 0 and 4095")  # fmt: skip


def test_tokens(server: Sandboxd, volume: Content) -> None:
    url = f"{server.url}/volumecontent/{volume.id}/path"
    refused(httpx.get(url, params={"path": "/"}), 401, "unauthorized",
            "Missing volume token (Authorization: Bearer <token>)")  # fmt: skip
    with server.client() as api:  # an API key opens no volume
        refused(api.get(url, params={"path": "/"}), 401, "unauthorized",
                "Missing volume token (Authorization: Bearer <token>)")  # fmt: skip
    other = Content(server, f"o{os.urandom(4).hex()}")
    invalid = "Invalid or expired volume token"
    for token in (other.token, volume.token + "0", "garbage"):
        response = httpx.get(
            url, params={"path": "/"}, headers={"Authorization": f"Bearer {token}"}
        )
        refused(response, 401, "unauthorized", invalid)
    key = Tokens((server.state_dir / "secret").read_bytes()).volumes_key()
    expired = VolumeTokens(key, lifetime_s=-1).mint(volume.id)
    response = httpx.get(url, params={"path": "/"}, headers={"Authorization": f"Bearer {expired}"})
    refused(response, 401, "unauthorized", invalid)
    # A fresh token from GET /volumes/{id} opens it as well as the first.
    with server.client() as api:
        fresh = api.get(f"/volumes/{volume.id}").json()["token"]
    assert httpx.get(url, params={"path": "/"},
                     headers={"Authorization": f"Bearer {fresh}"}).status_code == 200  # fmt: skip
    refused(httpx.get(f"{server.url}/volumecontent/nope/path", params={"path": "/"}), 400,
            "bad_request", "Invalid volume ID")  # fmt: skip
    # A deleted volume's token opens nothing.
    with server.client() as api:
        assert api.delete(f"/volumes/{other.id}").status_code == 204
    refused(other.call("GET", "path", "/"), 404, "not_found", "Volume not found")
    other.http.close()


def test_streaming_both_ways(volume: Content) -> None:
    data = os.urandom(9 << 20)

    def pieces() -> Iterator[bytes]:  # sent chunked: no Content-Length
        for i in range(0, len(data), 100_000):
            yield data[i : i + 100_000]

    made = volume.call("PUT", "file", "/big.bin", content=pieces(),
                       headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    assert made.status_code == 201, made.text
    assert made.json()["size"] == len(data)
    with volume.http.stream("GET", "/file", params={"path": "/big.bin"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/octet-stream"
        got = b"".join(response.iter_bytes())
    assert got == data


def test_an_upload_outlasts_the_body_deadline(volume: Content) -> None:
    """A volume upload takes as long as it takes while its bytes keep coming: the port's body
    deadline (shortened here) counts between its pieces, not from its head."""
    landed = volume.root / "slow.bin"
    started = time.monotonic()

    def pieces() -> Iterator[bytes]:  # each MiB sent once the one before is on the volume
        for i in range(1, 121):
            yield os.urandom(1 << 20)
            wait_until(lambda: landed.exists() and landed.stat().st_size >= i << 20, 60,  # noqa: B023
                       f"MiB {i} on the volume")  # fmt: skip

    made = volume.call("PUT", "file", "/slow.bin", content=pieces(),
                       headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    assert time.monotonic() - started > BODY_DEADLINE_S  # else this proved nothing
    assert made.status_code == 201, made.text
    assert made.json()["size"] == 120 << 20


def test_full_volume(server: Sandboxd) -> None:
    """A 32 MiB volume takes no 40 MiB file: 507, the file gone, the host's disk untouched."""
    volume = Content(server, "small", sizeMB=32)
    refused(volume.write("/fill.bin", os.urandom(40 << 20)), 507, "insufficient_storage",
            "the volume is full: no space left on its filesystem")  # fmt: skip
    refused(volume.call("GET", "path", "/fill.bin"), 404, "not_found", "path '/fill.bin' not found")
    image = server.state_dir / "volumes" / f"{volume.id}.img"
    assert os.stat(image).st_blocks * 512 <= 32 << 20
    assert volume.write("/after.txt", b"room again").status_code == 201
    volume.http.close()
    with server.client() as api:
        assert api.delete(f"/volumes/{volume.id}").status_code == 204


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory beside the volume, with a secret file in it."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("host secret")
    return tmp_path / "outside"


def plant(volume: Content, outside: Path) -> None:
    """What a hostile sandbox could leave in its volume: links out (absolute and relative, to a
    directory and to a file), a FIFO, and a hard link (only to a file in the volume itself: a
    hard link never crosses filesystems)."""
    root = volume.root
    (root / "dir_out").symlink_to(outside)
    (root / "up").symlink_to("../../..")
    (root / "file_out").symlink_to(outside / "secret")
    (root / "inner").mkdir()
    (root / "inner" / "climb").symlink_to("../../" + "../" * 8 + str(outside).lstrip("/"))
    os.mkfifo(root / "fifo")
    (root / "mine").write_text("mine")
    os.link(root / "mine", root / "hard")
    with pytest.raises(OSError, match="Invalid cross-device link"):
        os.link(outside / "secret", root / "stolen")


def test_hostile_tree_never_leads_out(volume: Content, outside: Path) -> None:
    plant(volume, outside)
    before = sorted(os.listdir(outside)), os.stat(outside / "secret")
    link = "goes through a symbolic link"
    for path in ("/dir_out/secret", "/up/etc/passwd", "/inner/climb/secret", "/file_out"):
        response = volume.call("GET", "file", path)
        assert response.status_code == 400, (path, response.text)
        assert link in response.json()["message"]
        assert b"host secret" not in response.content
    for path in ("/dir_out/new", "/inner/climb/new", "/file_out", "/up/x"):
        assert volume.write(path, b"pwned", force=True).status_code == 400, path
    refused(volume.call("POST", "dir", "/dir_out/sub", params={"force": "true"}), 400,
            "bad_request", f"path '/dir_out' {link}")  # fmt: skip
    refused(volume.call("GET", "dir", "/dir_out"), 404, "not_found",
            "path '/dir_out' is not a directory")  # fmt: skip
    refused(volume.call("PATCH", "path", "/file_out", json={"mode": 0o777}), 400, "bad_request",
            "path '/file_out' is a symbolic link: it has no mode")  # fmt: skip
    refused(volume.call("PATCH", "path", "/dir_out/secret", json={"uid": 0}), 400,
            "bad_request", f"path '/dir_out' {link}")  # fmt: skip
    # A link's own ids change, never its target's.
    assert volume.call("PATCH", "path", "/file_out", json={"uid": 4242}).status_code == 200
    assert os.lstat(volume.root / "file_out").st_uid == 4242
    # A FIFO is neither read nor written (nothing blocks on it).
    refused(volume.call("GET", "file", "/fifo"), 400, "bad_request",
            "path '/fifo' is not a regular file")  # fmt: skip
    refused(volume.write("/fifo", b"x", force=True), 400, "bad_request",
            "path '/fifo' is not a regular file")  # fmt: skip
    # Listings show links as links, with their targets, and never descend through them.
    listed = {e["path"]: e for e in volume.call("GET", "dir", "/", params={"depth": 10}).json()}
    assert listed["/dir_out"]["type"] == "symlink"
    assert listed["/dir_out"]["target"] == str(outside)
    assert not any(p.startswith(("/dir_out/", "/up/", "/inner/climb/")) for p in listed)
    assert listed["/fifo"]["type"] == "unknown"
    # The hard link is the volume's own file: writing through it stays inside.
    assert volume.write("/hard", b"changed", force=True).status_code == 201
    assert (volume.root / "mine").read_text() == "changed"
    # Removing links removes the links.
    for path in ("/dir_out", "/up", "/file_out", "/inner"):
        assert volume.call("DELETE", "path", path).status_code == 204
    assert (sorted(os.listdir(outside)), os.stat(outside / "secret")) == before
    assert (outside / "secret").read_text() == "host secret"


def test_mount_inside_is_not_entered(volume: Content, tmp_path: Path) -> None:
    """Something mounted inside the volume on the host is another filesystem: never entered."""
    (volume.root / "mnt").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume.root / "mnt")], check=True)
    try:
        (volume.root / "mnt" / "other").write_text("other filesystem")
        refused(volume.call("GET", "file", "/mnt/other"), 400, "bad_request",
                "path '/mnt/other' leaves the volume")  # fmt: skip
        refused(volume.write("/mnt/new", b"x", force=True), 400, "bad_request",
                "path '/mnt' leaves the volume")  # fmt: skip
        listed = [e["path"] for e in volume.call("GET", "dir", "/", params={"depth": 5}).json()]
        assert listed == ["/mnt"]
        assert sorted(os.listdir(volume.root / "mnt")) == ["other"]
    finally:
        subprocess.run(["umount", str(volume.root / "mnt")], check=True)
