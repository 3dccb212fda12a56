"""Pulled layers stacked the way a sandbox's root is (sandboxd.runtime.nspawn.steps Layers and Overlay):
each layer bound through an idmapped mount, an overlay over them. The whiteouts and opaque
directories of the upper layers hide what the lower ones have, and the layers' owners appear
shifted into the sandbox's uid range."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from sandboxd.host import libc, overlay
from sandboxd.host.removal import detach_mounts
from sandboxd.host.userns import mapped_namespace
from sandboxd.images.pull import pull
from sandboxd.layers.entries import OPAQUE_XATTR
from tests.images.oci_layout import Layer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.layers.store import LayerStore

pytestmark = pytest.mark.root

# Above systemd's container range (where sandboxes' ranges are): no sandbox has these ids.
UID_BASE = 0x70000000


def test_overlay_of_the_layers_shows_the_deletions(
    push: Callable[..., str], store: LayerStore, tmp_path: Path
) -> None:
    base = (
        Layer()
        .file("etc/keep", b"kept")
        .file("etc/gone", b"deleted above")
        .file("opt/old/x", b"hidden by the opaque dir")
        .file("opt/old/sub/y", b"hidden too")
        .file("home/user/.profile", b"", uid=1000, gid=1000)
    )
    top = Layer().whiteout("etc/gone").opaque("opt/old").file("opt/old/new", b"new")
    image = pull(push([base, top]), store, insecure=True)
    lower, upper_layer = image.layers
    whiteout = (upper_layer / "etc/gone").lstat()
    assert stat.S_ISCHR(whiteout.st_mode)
    assert whiteout.st_rdev == os.makedev(0, 0)
    assert os.getxattr(upper_layer / "opt/old", OPAQUE_XATTR) == b"y"
    assert not (upper_layer / "etc/.wh.gone").exists()
    assert (lower / "etc/gone").exists()

    binds, root = tmp_path / "binds", tmp_path / "root"
    upper, work = tmp_path / "upper", tmp_path / "work"
    for d in (binds, upper, work):
        d.mkdir()
    try:
        userns = mapped_namespace(UID_BASE)
        for i, layer in enumerate(image.layers):
            (binds / str(i)).mkdir()
            libc.idmapped_bind(str(layer), str(binds / str(i)), userns)
        overlay.mount([binds / "0", binds / "1"], upper, work, root)

        assert (root / "etc/keep").read_bytes() == b"kept"
        assert sorted(os.listdir(root / "etc")) == ["keep"]
        assert sorted(os.listdir(root / "opt/old")) == ["new"]
        assert (root / "etc/keep").stat().st_uid == UID_BASE
        profile = (root / "home/user/.profile").stat()
        assert (profile.st_uid, profile.st_gid) == (UID_BASE + 1000, UID_BASE + 1000)
        (root / "etc/keep").unlink()  # a sandbox's own deletion lands in its upper directory
        assert (lower / "etc/keep").exists()
    finally:
        detach_mounts(root)
        detach_mounts(binds)
