"""A build sandbox's writable layer made into a template layer (sandboxd.runtime.nspawn.export,
into the layer store: sandboxd.layers.store): a
real overlay as a sandbox has it (the image's layer idmapped into the sandbox's range, an upper
directory owned by the range), changed by a process that is root in the sandbox's user
namespace (files, deletions, an opaque directory, a hard link, a symlink, a capability), then
snapshotted; the image's layer plus the snapshot, stacked the same way, must show what the
sandbox saw, but for the files sandboxd itself writes."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import TemplateError
from sandboxd.guest.readiness import ENVD_UNIT
from sandboxd.host import libc
from sandboxd.host.removal import detach_mounts
from sandboxd.host.userns import mapped_namespace
from sandboxd.layers.entries import OPAQUE_XATTR
from sandboxd.layers.store import LayerStore
from sandboxd.runtime.nspawn.export import layer_from_upper
from sandboxd.runtime.nspawn.steps import written_by_sandboxd
from tests.builds.overlays import deep_trees, make_deep, read_deep, tree, writable

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

pytestmark = pytest.mark.root

WRITTEN_BY_SANDBOXD = written_by_sandboxd(ENVD_UNIT)

# Above systemd's container range (where sandboxes' ranges are): no sandbox has these ids.
UID_BASE = 0x70010000

# What a build step does, as root of the sandbox (paths below the sandbox's root, $R).
STEP = """
set -eu
echo new > "$R/etc/new.conf"
rm "$R/etc/gone"
rm -r "$R/opt/old" && mkdir "$R/opt/old" && echo fresh > "$R/opt/old/only"
echo mine > "$R/home/user/mine" && chown 1000:1000 "$R/home/user/mine"
ln "$R/home/user/mine" "$R/home/user/also-mine"
ln -s ../etc/new.conf "$R/opt/link"
echo '#!/bin/sh' > "$R/usr/bin/ping" && setcap cap_net_raw+ep "$R/usr/bin/ping"
chmod 0700 "$R/home/user"
mkfifo "$R/opt/pipe"
"""


def as_sandbox_root(script: str, root: Path) -> None:
    """`script` run by root of a user namespace mapping 0..65535 to UID_BASE.., as a sandbox's
    processes are."""
    userns = mapped_namespace(UID_BASE)

    def enter() -> None:
        libc.setns(userns, libc.CLONE_NEWUSER)
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)

    subprocess.run(
        ["sh", "-c", script],
        env={"R": str(root), "PATH": os.environ["PATH"]},
        preexec_fn=enter,
        check=True,
    )  # syscalls only in preexec_fn; fmt: skip


@contextlib.contextmanager
def idmapped(layers: Sequence[Path], binds: Path) -> Iterator[list[Path]]:
    """Each layer bound through an idmapped mount into UID_BASE's range (as steps.Layers)."""
    binds.mkdir()
    userns = mapped_namespace(UID_BASE)
    try:
        mapped = []
        for i, layer in enumerate(layers):
            (binds / str(i)).mkdir()
            libc.idmapped_bind(str(layer), str(binds / str(i)), userns)
            mapped.append(binds / str(i))
        yield mapped
    finally:
        detach_mounts(binds)


@pytest.fixture
def mounts() -> Iterator[Path]:
    """Where the sandbox-like root is mounted: a directory the sandbox's root may pass through
    (pytest's are host root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix="sandboxd-builds-"))
    d.chmod(0o711)
    try:
        yield d
    finally:
        detach_mounts(d)
        shutil.rmtree(d)


@pytest.fixture
def image(tmp_path: Path) -> Path:
    base = tmp_path / "image"
    for d in ("etc/systemd/system", "opt/old/sub", "home/user", "usr/bin"):
        (base / d).mkdir(parents=True)
    (base / "etc/keep").write_text("kept")
    (base / "etc/gone").write_text("deleted by the step")
    (base / "etc/resolv.conf").write_text("nameserver 192.0.2.1\n")
    (base / "opt/old/x").write_text("hidden by the opaque dir")
    (base / "opt/old/sub/y").write_text("hidden too")
    os.chown(base / "home/user", 1000, 1000)
    (base / "home/user").chmod(0o750)
    return base


def snapshot(upper: Path, layer: Path, exclude: Sequence[str]) -> None:
    """`upper` snapshotted as the layer `layer`, made as a build makes it: in a layer store."""
    LayerStore(layer.parent).add(
        layer.name, lambda new: layer_from_upper(upper, UID_BASE, new, exclude)
    )


def sandboxd_writes(upper: Path) -> None:
    """What sandboxd writes into a writable layer before booting (steps.UnitOverrides and
    Resolver): root of the sandbox's files, in directories made for them."""
    upper.mkdir()
    os.chown(upper, UID_BASE, UID_BASE)
    for name in WRITTEN_BY_SANDBOXD:
        path = upper
        for part in name.split("/")[:-1]:
            path /= part
            path.mkdir(exist_ok=True)
            os.chown(path, UID_BASE, UID_BASE)
        (path / name.rsplit("/", 1)[-1]).write_text("sandboxd's")
        os.chown(path / name.rsplit("/", 1)[-1], UID_BASE, UID_BASE)


def test_the_snapshot_shows_what_the_sandbox_saw(image: Path, tmp_path: Path, mounts: Path) -> None:
    upper, layer = tmp_path / "upper", tmp_path / "layer"
    sandboxd_writes(upper)
    with idmapped([image], tmp_path / "binds") as lowers, \
            writable(lowers, upper, mounts / "root") as root:  # fmt: skip
        as_sandbox_root(STEP, root)
        seen = tree(root)
        cap_seen = os.getxattr(root / "usr/bin/ping", "security.capability")
    # The upper directory has what overlayfs and the kernel made: a whiteout owned by the
    # mounter, an opaque directory, a version 3 capability for the namespace's root.
    assert (upper / "etc/gone").lstat().st_uid == 0
    assert os.getxattr(upper / "opt/old", OPAQUE_XATTR) == b"y"
    assert os.getxattr(upper / "usr/bin/ping", "security.capability")[20:] == (
        UID_BASE.to_bytes(4, "little")
    )

    snapshot(upper, layer, WRITTEN_BY_SANDBOXD)

    gone = (layer / "etc/gone").lstat()
    assert stat.S_ISCHR(gone.st_mode)
    assert gone.st_rdev == os.makedev(0, 0)
    assert os.getxattr(layer / "opt/old", OPAQUE_XATTR) == b"y"
    assert (layer / "home/user/mine").stat().st_uid == 1000
    assert (layer / "home/user/also-mine").stat().st_ino == (layer / "home/user/mine").stat().st_ino
    assert (layer / "etc/new.conf").stat().st_uid == 0
    assert not (layer / "etc/resolv.conf").exists()
    assert not (layer / "etc/systemd").exists()  # made only for sandboxd's drop-in
    for path in layer.rglob("*"):
        assert not [a for a in os.listxattr(path, follow_symlinks=False)
                    if a.startswith("trusted.") and a != OPAQUE_XATTR]  # fmt: skip

    with idmapped([image, layer], tmp_path / "binds2") as lowers, \
            writable(lowers, tmp_path / "upper2", mounts / "root2") as root:  # fmt: skip
        again = tree(root)
        assert os.getxattr(root / "usr/bin/ping", "security.capability") == cap_seen
        assert (root / "etc/resolv.conf").read_text() == "nameserver 192.0.2.1\n"
    for name in WRITTEN_BY_SANDBOXD:
        seen.pop(name)
        again.pop(name, None)
    seen.pop("etc/systemd/system/envd.service.d")
    assert again == seen
    assert seen["home/user"][1:4] == (UID_BASE + 1000, UID_BASE + 1000, 0o700)
    assert seen["opt/old/only"][4] == b"fresh\n"
    assert "opt/old/x" not in seen
    assert stat.S_ISFIFO(seen["opt/pipe"][0])  # type: ignore[arg-type]


def test_a_step_that_keeps_writing_near_an_excluded_path_keeps_its_files(
    image: Path, tmp_path: Path, mounts: Path
) -> None:
    upper, layer = tmp_path / "upper", tmp_path / "layer"
    sandboxd_writes(upper)
    with idmapped([image], tmp_path / "binds") as lowers, \
            writable(lowers, upper, mounts / "root") as root:  # fmt: skip
        as_sandbox_root(
            'mkdir "$R/etc/systemd/system/envd.service.d/x" && rm "$R/etc/resolv.conf"', root
        )

    snapshot(upper, layer, WRITTEN_BY_SANDBOXD)

    assert (layer / "etc/systemd/system/envd.service.d/x").is_dir()
    assert not (layer / "etc/systemd/system/envd.service.d/zz-sandbox-userns.conf").exists()
    assert not (layer / "etc/resolv.conf").exists()  # the step's deletion is not kept either


def test_an_id_outside_the_range_leaves_no_layer(tmp_path: Path) -> None:
    upper, layer = tmp_path / "upper", tmp_path / "layer"
    upper.mkdir()
    os.chown(upper, UID_BASE, UID_BASE)
    (upper / "ok").write_text("in range")
    os.chown(upper / "ok", UID_BASE + 5, UID_BASE + 5)
    (upper / "host").write_text("the host's root")

    with pytest.raises(TemplateError, match=r"/host belongs to host ids 0:0, outside"):
        snapshot(upper, layer, ())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "upper"]


def test_an_overlay_redirect_is_refused(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "moved").mkdir(parents=True)
    os.chown(upper, UID_BASE, UID_BASE)
    os.chown(upper / "moved", UID_BASE, UID_BASE)
    os.setxattr(upper / "moved", "trusted.overlay.redirect", b"/elsewhere")

    with pytest.raises(TemplateError, match=r"trusted\.overlay\.redirect"):
        snapshot(upper, tmp_path / "layer", ())
    assert not (tmp_path / "layer").exists()


def test_a_deep_tree_is_snapshotted(tmp_path: Path) -> None:
    upper, layer = tmp_path / "upper", tmp_path / "layer"
    upper.mkdir()
    os.chown(upper, UID_BASE, UID_BASE)
    with deep_trees(upper, layer):
        make_deep(upper, UID_BASE)

        snapshot(upper, layer, ())

        assert read_deep(layer) == b"deep"
