"""The provisioning layer, read back from its files: the `user` account added where the image
lacks it (through the image's merged layers, whiteouts included), sudo where the image has it,
and the images envd cannot run in refused with a plain message."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from sandboxd.builds.provision import MAX_LIBC_BYTES, provision
from sandboxd.errors import TemplateError
from sandboxd.host.removal import mounts_under
from sandboxd.layers.store import LayerStore
from tests.builds.trees import MULTIARCH, alpine_like_tree, glibc_tree

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

SUDOERS = "etc/sudoers.d/user"


def provisioned(tmp_path: Path, *lowers: Path) -> Path:
    layer = tmp_path / "provision"
    layer.mkdir()
    with LayerStore(tmp_path).view(lowers) as view:
        provision(view, layer)
    # The image's merged view was mounted beside the layer for the call only.
    assert mounts_under(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".view-")] == []
    return layer


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@pytest.fixture
def busybox_root(tmp_path: Path) -> Path:
    root = tmp_path / "image"
    glibc_tree(root)
    return root


def test_a_busybox_image_gets_user_without_sudo(tmp_path: Path, busybox_root: Path) -> None:
    layer = provisioned(tmp_path, busybox_root)
    assert (layer / "etc/passwd").read_text().splitlines() == [
        "root:x:0:0:root:/root:/bin/sh", "user:x:1000:1000::/home/user:/bin/sh"]  # fmt: skip
    assert (layer / "etc/group").read_text().splitlines() == ["root:x:0:", "user:x:1000:"]
    assert (layer / "etc/shadow").read_text().splitlines()[-1] == "user:!:::::::"
    assert owner_and_mode(layer / "etc/shadow") == (0, 0, 0o640)  # as the image's
    assert owner_and_mode(layer / "etc/passwd") == (0, 0, 0o644)
    assert owner_and_mode(layer / "home/user") == (1000, 1000, 0o755)
    assert owner_and_mode(layer) == owner_and_mode(busybox_root)
    assert not (layer / SUDOERS).exists()  # no sudo in the image
    assert (layer / "bin/bash").read_text() == '#!/bin/sh\nexec /bin/sh "$@"\n'  # the SDKs'
    assert owner_and_mode(layer / "bin/bash") == (0, 0, 0o755)  # `/bin/bash -l -c CMD`
    assert owner_and_mode(layer / "bin") == owner_and_mode(busybox_root / "bin")
    assert sorted(p.name for p in layer.iterdir()) == ["bin", "etc", "home"]


def test_taken_ids_are_skipped_and_bash_is_the_shell(tmp_path: Path, busybox_root: Path) -> None:
    with open(busybox_root / "etc/passwd", "a") as f:
        f.write("alice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1000::/home/bob:/bin/sh\n")
    with open(busybox_root / "etc/group", "a") as f:
        f.write("alice:x:1000:\nstaff:x:1002:\n")
    (busybox_root / "bin/bash").symlink_to("busybox")
    layer = provisioned(tmp_path, busybox_root)
    assert (layer / "etc/passwd").read_text().splitlines()[-1] == (
        "user:x:1002:1001::/home/user:/bin/bash"
    )
    assert (layer / "etc/group").read_text().splitlines()[-1] == "user:x:1001:"


def test_whiteouts_of_upper_layers_count(tmp_path: Path, busybox_root: Path) -> None:
    (busybox_root / "usr/bin").mkdir(parents=True)
    (busybox_root / "usr/bin/sudo").write_text("")
    (busybox_root / "bin/bash").symlink_to("busybox")
    upper = tmp_path / "upper"
    (upper / "usr/bin").mkdir(parents=True)
    (upper / "bin").mkdir()
    for removed in ("usr/bin/sudo", "bin/bash"):  # overlayfs whiteouts: 0/0 character devices
        os.mknod(upper / removed, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    layer = provisioned(tmp_path, busybox_root, upper)
    assert not (layer / SUDOERS).exists()
    assert (layer / "etc/passwd").read_text().endswith(":/home/user:/bin/sh\n")
    (tmp_path / "without-whiteouts").mkdir()
    with_sudo = provisioned(tmp_path / "without-whiteouts", busybox_root)
    assert (with_sudo / SUDOERS).read_text() == "user ALL=(ALL:ALL) NOPASSWD: ALL\n"
    assert owner_and_mode(with_sudo / SUDOERS) == (0, 0, 0o440)


def test_debian_keeps_its_user_and_gets_sudo(tmp_path: Path, debian_stage: Path) -> None:
    layer = provisioned(tmp_path, debian_stage)
    assert not (layer / "etc/passwd").exists()  # `user` is there already
    assert (layer / SUDOERS).read_text() == "user ALL=(ALL:ALL) NOPASSWD: ALL\n"
    assert owner_and_mode(layer / "etc/sudoers.d") == owner_and_mode(debian_stage / "etc/sudoers.d")


def test_an_alpine_like_image_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "alpine"
    alpine_like_tree(root)
    with pytest.raises(TemplateError, match="musl-based images such as Alpine are not supported"):
        provisioned(tmp_path, root)


def test_an_image_without_a_shell_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "image"
    glibc_tree(root, with_sh=False)
    with pytest.raises(TemplateError, match="the image has no /bin/sh"):
        provisioned(tmp_path, root)


def test_an_old_glibc_is_refused(tmp_path: Path, busybox_root: Path) -> None:
    libc = busybox_root / MULTIARCH / "libc.so.6"
    libc.unlink()
    libc.write_bytes(b"\0GNU C Library (Old GLIBC 2.17-326) stable release version 2.17.\n")
    with pytest.raises(TemplateError, match=r"glibc is 2\.17: envd needs 2\.28 or newer"):
        provisioned(tmp_path, busybox_root)


def test_an_image_without_gcc_s_runtime_is_refused(tmp_path: Path, busybox_root: Path) -> None:
    (busybox_root / MULTIARCH / "libgcc_s.so.1").unlink()
    with pytest.raises(TemplateError, match=r"no libgcc_s\.so\.1"):
        provisioned(tmp_path, busybox_root)


def test_an_unreadable_account_file_is_a_template_error(tmp_path: Path, busybox_root: Path) -> None:
    (busybox_root / "etc/passwd").unlink()
    (busybox_root / "etc/passwd").mkdir()
    with pytest.raises(TemplateError, match="the image's /etc/passwd is not a regular file"):
        provisioned(tmp_path, busybox_root)


def test_a_fifo_for_an_account_file_is_refused_without_blocking(
    tmp_path: Path, busybox_root: Path
) -> None:
    (busybox_root / "etc/passwd").unlink()
    os.mkfifo(busybox_root / "etc/passwd")  # nobody writes it: a plain open waits for ever
    with pytest.raises(TemplateError, match="the image's /etc/passwd is not a regular file"):
        provisioned(tmp_path, busybox_root)


def test_a_huge_libc_is_refused_unread(tmp_path: Path, busybox_root: Path) -> None:
    libc = busybox_root / MULTIARCH / "libc.so.6"
    with open(libc, "r+b") as f:
        f.truncate(MAX_LIBC_BYTES + 1)  # sparse: a sandboxd reading it whole would hold it all
    with pytest.raises(TemplateError, match=r"libc\.so\.6 is larger than 32 MiB"):
        provisioned(tmp_path, busybox_root)
