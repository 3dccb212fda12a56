"""Pulling images from the test's registry into a layer store: what lands on disk, the config,
digests, layers shared between images and unpacked once, even by concurrent pulls."""

from __future__ import annotations

import functools
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from sandboxd.images.pull import ImageConfig, pull
from sandboxd.layers.store import LayerStore
from tests.images.oci_layout import Layer, layer_digest, write_layout

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.images.registry import Registry

pytestmark = pytest.mark.root


def busybox_tree() -> Layer:
    """A busybox-style root: one binary, links to it, a set-uid file, a user's home."""
    return (
        Layer()
        .dir("./")
        .dir("bin")
        .file("bin/busybox", b"#!/bin/busybox\n", mode=0o755)
        .symlink("bin/sh", "/bin/busybox")  # absolute: resolves inside the container
        .hardlink("bin/ls", "bin/busybox")
        .dir("usr/bin")
        .file("usr/bin/sudo", b"sudo", mode=0o4755)
        .file("usr/bin/ping", b"ping", mode=0o755, xattrs={"user.note": "kept"})
        .dir("home/user", mode=0o750, uid=1000, gid=1000)
        .file("home/user/.profile", b"PS1='$ '\n", uid=1000, gid=1000)
        .dir("dev")
        .chardev("dev/null", 1, 3)  # a device node: skipped
    )


def test_image_layers_config_and_digest(
    push: Callable[..., str], store: LayerStore, registry: Registry
) -> None:
    config = {"Env": ["PATH=/bin", "A=1"], "WorkingDir": "/home/user", "User": "user",
              "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"]}  # fmt: skip
    ref = push([busybox_tree(), Layer().file("etc/motd", b"hello\n")], config)

    image = pull(ref, store, insecure=True)

    assert image.reference == ref
    assert image.config == ImageConfig(("PATH=/bin", "A=1"), "/home/user", "user",
                                       ("/bin/sh", "-c"), ("echo hi",))  # fmt: skip
    assert image.unpacked == 2
    root, top = image.layers
    assert (top / "etc/motd").read_bytes() == b"hello\n"
    assert os.readlink(root / "bin/sh") == "/bin/busybox"
    assert (root / "bin/ls").stat().st_ino == (root / "bin/busybox").stat().st_ino
    sudo = (root / "usr/bin/sudo").stat()
    assert stat.S_IMODE(sudo.st_mode) == 0o4755
    assert (sudo.st_uid, sudo.st_gid) == (0, 0)
    home = (root / "home/user").stat()
    assert (home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode)) == (1000, 1000, 0o750)
    assert (root / "home/user/.profile").stat().st_uid == 1000
    assert os.getxattr(root / "usr/bin/ping", "user.note") == b"kept"
    assert not (root / "dev/null").exists()
    assert (root / "bin/busybox").stat().st_mtime == 1_700_000_000

    pinned = pull(f"{ref.rsplit(':', 1)[0]}@{image.digest}", store, insecure=True)
    assert (pinned.digest, pinned.layers, pinned.unpacked) == (image.digest, image.layers, 0)


def test_images_share_their_common_layer(push: Callable[..., str], store: LayerStore) -> None:
    base = busybox_tree()
    first = push([base, Layer().file("one", b"1")])
    second = push([base, Layer().file("two", b"2")])

    a = pull(first, store, insecure=True)
    b = pull(second, store, insecure=True)

    assert (a.unpacked, b.unpacked) == (2, 1)
    assert a.layers[0] == b.layers[0] == store.path(layer_digest(base))
    assert a.layers[1] != b.layers[1]
    assert sorted(p.name for p in store.dir.iterdir() if not p.name.startswith(".")) == sorted(
        {p.name for p in (*a.layers, *b.layers)}
    )
    assert not [p for p in store.dir.iterdir() if p.name.startswith((".new-", ".pull-"))]


def test_concurrent_pulls_unpack_a_shared_layer_once(
    push: Callable[..., str], tmp_path: Path
) -> None:
    base = busybox_tree()
    for i in range(200):  # a layer that takes a while to unpack
        base.file(f"data/{i}", os.urandom(4096))
    refs = [push([base, Layer().file(f"top{i}", b"x")]) for i in range(4)]

    for round in range(3):
        store = LayerStore(tmp_path / f"store{round}")
        with ThreadPoolExecutor(len(refs)) as pool:
            images = list(pool.map(functools.partial(pull, layers=store, insecure=True), refs))

        assert sum(i.unpacked for i in images) == 1 + len(refs)
        assert {i.layers[0] for i in images} == {store.path(layer_digest(base))}
        assert len(list((store.path(layer_digest(base)) / "data").iterdir())) == 200


def test_mirror_serves_docker_hub_names(
    registry: Registry, tmp_path: Path, store: LayerStore
) -> None:
    write_layout(tmp_path / "oci", [Layer().file("hub", b"mirrored")], {})
    registry.push(tmp_path / "oci", "library/mirrored:1.0")

    image = pull("mirrored:1.0", store, mirror=registry.host, insecure=True)

    assert image.reference == f"{registry.host}/library/mirrored:1.0"
    assert (image.layers[0] / "hub").read_bytes() == b"mirrored"
