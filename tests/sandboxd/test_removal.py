"""Removing trees that have something mounted inside: the mount is detached, never emptied.
(A build step killed before its cleanup once left the host's /dev bound into an image
directory; removing that directory must not touch the host's /dev.)"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.removal import mounts_under, remove_tree

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root


def test_remove_tree_detaches_binds_instead_of_emptying_them(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("still here")
    doomed = tmp_path / "image"
    (doomed / "dev").mkdir(parents=True)
    (doomed / "etc").mkdir()
    (doomed / "etc/file").write_text("x")
    subprocess.run(["mount", "--rbind", str(precious), str(doomed / "dev")], check=True)
    try:
        remove_tree(doomed)
    finally:
        if mounts_under(doomed):
            subprocess.run(["umount", "-R", "-l", str(doomed / "dev")], check=False)
    assert not doomed.exists()
    assert (precious / "keep").read_text() == "still here"


def test_remove_tree_of_a_missing_path_is_a_no_op(tmp_path: Path) -> None:
    (tmp_path / "neighbour").write_text("kept")
    remove_tree(tmp_path / "absent")  # no error
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("neighbour", "kept")]
