"""Builds never wait on what an image holds, and never fill the disk, over plain HTTP against
real `sandboxd serve`s: an image whose /etc/passwd is a FIFO, or whose libc.so.6 is huge, fails
its build with a clear reason (pulled from a registry of the test's own on 127.0.0.1); a build
stuck in a step ends at serve's deadline; an upload past the storage quota is refused while it
streams, or from its Content-Length alone, and a build whose layer passes it fails."""

from __future__ import annotations

import gzip
import io
import math
import os
import shutil
import socket
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from sandboxd.builds.provision import MAX_LIBC_BYTES
from tests.builds.build_flow import request, start, tar_of
from tests.builds.registry_images import push_image, tree_layer
from tests.builds.trees import MULTIARCH, glibc_tree
from tests.images.registry import start_registry
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import httpx

    from tests.images.registry import Registry
    from tests.sandboxd.serving import Sandboxd

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]

QUOTA_MB = 64
DEADLINE_S = 15


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    dir = Path(tempfile.mkdtemp(prefix="sandboxd-limits-registry-"))
    try:
        running = start_registry(dir)
        yield running
        running.stop()
    finally:
        shutil.rmtree(dir)


@pytest.fixture(scope="module")
def image_server(
    tmp_path_factory: pytest.TempPathFactory, base_template: Path, envd_artifact: Path
) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("limits-images") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK,
                          "--envd-artifact", str(envd_artifact)) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def limited_server(
    tmp_path_factory: pytest.TempPathFactory, base_template: Path
) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("limits") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK,
                          "--build-storage-mb", str(QUOTA_MB)) as server:  # fmt: skip
        yield server


def ended(api: httpx.Client, recipe: dict[str, Any]) -> dict[str, Any]:
    """Start a build of `recipe` and wait, with no bound but pytest's own, for its end."""
    build = request(api, f"limits-{uuid.uuid4().hex[:8]}")
    answer = start(api, build, recipe)
    assert answer.status_code == 202, answer.text
    path = f"/templates/{build.template_id}/builds/{build.build_id}/status"

    def status() -> dict[str, Any] | None:
        answer = api.get(path)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body if body["status"] not in ("waiting", "building") else None

    return wait_until(status, math.inf, "the build to end")


def pushed(registry: Registry, work: Path, change: Callable[[Path], None]) -> str:
    """A busybox-like image (tests/builds/trees.py) with `change` made to its tree."""

    def layer(out: Path) -> None:
        root = out.parent / "root"
        glibc_tree(root)
        change(root)
        try:
            tree_layer(root, out)
        finally:
            shutil.rmtree(root)

    return push_image(registry, work, f"limits/{work.name}", layer)


def fifo_passwd(root: Path) -> None:
    (root / "etc/passwd").unlink()
    os.mkfifo(root / "etc/passwd")  # nobody ever writes it: a plain open waits for ever


def huge_libc(root: Path) -> None:
    with open(root / MULTIARCH / "libc.so.6", "r+b") as f:  # still a working libc, padded
        f.truncate(MAX_LIBC_BYTES + 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (fifo_passwd, "the image's /etc/passwd is not a regular file"),
        (huge_libc, "libc.so.6 is larger than 32 MiB, the most a build reads of it"),
    ],
    ids=["fifo-passwd", "huge-libc"],
)
def test_an_image_with_hostile_files_fails_its_build_clearly(
    image_server: Sandboxd, registry: Registry, tmp_path: Path,
    change: Callable[[Path], None], message: str,
) -> None:  # fmt: skip
    image = pushed(registry, tmp_path / change.__name__.replace("_", "-"), change)
    with image_server.client() as api:
        final = ended(api, {"fromImage": image, "force": False, "steps": []})
    assert final["status"] == "error", final
    assert final["reason"]["step"] == "base", final["reason"]
    assert message in final["reason"]["message"], final["reason"]


def test_the_same_image_unchanged_builds(
    image_server: Sandboxd, registry: Registry, tmp_path: Path
) -> None:
    """What the refusals above are measured against; and a build from an image under serve's
    umask 077 still gives the sandbox's `user` a tree it can read."""
    image = pushed(registry, tmp_path / "plain", lambda _root: None)
    check = "ls / /etc /lib64 >/dev/null && cat /etc/passwd >/dev/null && test $(id -un) = user"
    recipe = {"fromImage": image, "force": False,
              "steps": [{"type": "RUN", "args": [check], "force": False}]}  # fmt: skip
    with image_server.client() as api:
        final = ended(api, recipe)
    assert final["status"] == "ready", final


def test_a_pull_past_the_quota_is_refused_as_it_unpacks(
    tmp_path_factory: pytest.TempPathFactory, base_template: Path, envd_artifact: Path,
    registry: Registry, tmp_path: Path,
) -> None:  # fmt: skip
    image = pushed(registry, tmp_path / "big-layer", huge_libc)  # a 33 MiB layer
    state = tmp_path_factory.mktemp("limits-pull") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK, "--envd-artifact", str(envd_artifact),
                          "--build-storage-mb", "16") as server, server.client() as api:  # fmt: skip
        final = ended(api, {"fromImage": image, "force": False, "steps": []})
        assert final["status"] == "error", final
        assert final["reason"]["step"] == "base", final["reason"]
        message = final["reason"]["message"]
        assert message.startswith("base: layer "), message  # refused in the unpack, not after
        assert message.endswith(" would pass the build storage quota of 16 MiB (uploads and "
                                "layers, sandboxes' pauses, snapshots and forks among them; "
                                "serve --build-storage-mb)"), message  # fmt: skip
        assert not [p for p in (state / "layers").iterdir() if p.name.startswith("sha256-")]


def test_a_stuck_build_ends_at_the_deadline(tmp_path: Path, base_template: Path) -> None:
    recipe = {"fromTemplate": "base", "force": True,
              "steps": [{"type": "RUN", "args": ["sleep infinity"], "force": True}]}  # fmt: skip
    flags = (NO_NETWORK, "--build-timeout", str(DEADLINE_S))
    with running_sandboxd(tmp_path / "state", base_template, *flags) as server, \
            server.client() as api:  # fmt: skip
        final = ended(api, recipe)
        sandboxes = server.state_dir / "sandboxes"
        assert not sandboxes.exists() or list(sandboxes.iterdir()) == []  # its sandbox killed
    assert final["status"] == "error", final
    assert final["reason"]["step"] == "1", final["reason"]
    assert final["reason"]["message"] == (
        f"the build ran past its deadline of {DEADLINE_S} s (serve --build-timeout)"
    )


def test_a_build_whose_layer_passes_the_quota_fails(limited_server: Sandboxd) -> None:
    big = f"head -c {QUOTA_MB + 16}M /dev/urandom > /big"
    recipe = {"fromTemplate": "base", "force": True,
              "steps": [{"type": "RUN", "args": [big, "root"], "force": True}]}  # fmt: skip
    with limited_server.client() as api:
        final = ended(api, recipe)
    assert final["status"] == "error", final
    assert final["reason"]["step"] == "1", final["reason"]
    assert "build storage quota of 64 MiB" in final["reason"]["message"], final["reason"]
    assert "--build-storage-mb" in final["reason"]["message"], final["reason"]
    layers = limited_server.state_dir / "layers"
    assert not [p.name for p in layers.iterdir() if p.name.startswith("step-")]  # removed


def zeros_tar_gz(size: int) -> bytes:
    """A gzipped tar of one file of `size` zeros, made without compressing them all: gzip
    members of one block of zeros, repeated (a stream of members is one gzip file)."""
    block = 16 << 20
    assert size % block == 0
    info = tarfile.TarInfo("zeros")
    info.size = size
    zeros = gzip.compress(bytes(block), compresslevel=9)
    return (gzip.compress(info.tobuf()) + zeros * (size // block)
            + gzip.compress(bytes(2 * tarfile.BLOCKSIZE)))  # fmt: skip


def upload_url(api: httpx.Client) -> tuple[str, str]:
    build = request(api, f"limits-{uuid.uuid4().hex[:8]}")
    files_hash = uuid.uuid4().hex * 2
    link = api.get(f"/templates/{build.template_id}/files/{files_hash}")
    assert link.status_code == 201, link.text
    return link.json()["url"], build.template_id


def test_an_upload_past_the_quota_is_refused_as_it_unpacks(limited_server: Sandboxd) -> None:
    archive = zeros_tar_gz(1 << 30)  # 1 MiB on the wire
    assert len(archive) < 2 << 20
    with limited_server.client() as api:
        url, template_id = upload_url(api)
        answer = api.put(url, content=archive)
        assert answer.status_code == 413, answer.text
        assert answer.json()["message"] == (
            f"the unpacked upload would pass the build storage quota of {QUOTA_MB} MiB "
            "(uploads and layers, sandboxes' pauses, snapshots and forks among them; serve "
            "--build-storage-mb)"
        )
        # Nothing of it is kept, and a small one still fits.
        uploads = limited_server.state_dir / "uploads" / template_id
        assert not uploads.exists() or list(uploads.iterdir()) == []
        assert api.put(upload_url(api)[0], content=tar_of({"a": b"fits"})).status_code == 200


def test_an_upload_larger_than_the_room_left_is_refused_before_its_body(
    limited_server: Sandboxd,
) -> None:
    """Its Content-Length alone: the body is never sent."""
    with limited_server.client() as api:
        url = urlsplit(upload_url(api)[0])
    head = (f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Content-Length: {QUOTA_MB << 20}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    assert url.hostname is not None
    assert url.port is not None
    with socket.create_connection((url.hostname, url.port)) as conn:
        conn.sendall(head)
        answer = io.BytesIO()
        while chunk := conn.recv(65536):
            answer.write(chunk)
    status, _, body = answer.getvalue().partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), answer.getvalue()[:500]
    assert b"--build-storage-mb" in body
