"""MakeDir, Move and Remove over the wire (§6.2, §6.3, §6.5)."""

from __future__ import annotations

import os
import pwd
from typing import TYPE_CHECKING

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import (
    FileType,
    MakeDirRequest,
    MoveRequest,
    RemoveRequest,
    StatRequest,
)
from tests.client import AS_USER

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync


@pytest.mark.root
def test_make_dir_creates_parents_owned_by_user(fs: FilesystemClientSync, workdir: Path) -> None:
    target = workdir / "a" / "b" / "c"
    entry = fs.make_dir(MakeDirRequest(path=str(target)), headers=AS_USER).entry
    assert entry is not None
    assert (entry.type, entry.path, entry.owner) == (FileType.DIRECTORY, str(target), "user")
    uid = pwd.getpwnam("user").pw_uid
    for d in (workdir / "a", workdir / "a" / "b", target):
        assert d.stat().st_uid == uid
    assert workdir.stat().st_uid == 0  # existing directories are never re-owned


def test_make_dir_existing(fs: FilesystemClientSync, workdir: Path) -> None:
    with pytest.raises(ConnectError) as err:
        fs.make_dir(MakeDirRequest(path=str(workdir)))
    assert err.value.code == Code.ALREADY_EXISTS
    assert err.value.message == f"directory already exists: {workdir}"
    (workdir / "file").write_text("")
    with pytest.raises(ConnectError) as err:
        fs.make_dir(MakeDirRequest(path=str(workdir / "file")))
    assert err.value.code == Code.INVALID_ARGUMENT
    assert "not a directory" in err.value.message


def test_make_dir_under_a_file_is_internal(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "file").write_text("")
    with pytest.raises(ConnectError) as err:
        fs.make_dir(MakeDirRequest(path=str(workdir / "file" / "sub")))
    assert err.value.code == Code.INTERNAL


def test_make_dir_relative_for_user(fs: FilesystemClientSync) -> None:
    name = f"envd-test-mkdir-{os.getpid()}"
    try:
        entry = fs.make_dir(MakeDirRequest(path=name), headers=AS_USER).entry
        assert entry is not None
        assert entry.path == f"/home/user/{name}"
    finally:
        os.rmdir(f"/home/user/{name}")


def test_move_file_creates_destination_parents(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "src.txt").write_text("data")
    dest = workdir / "new" / "dir" / "dst.txt"
    entry = fs.move(MoveRequest(source=str(workdir / "src.txt"), destination=str(dest))).entry
    assert entry is not None
    assert (entry.path, entry.name, entry.type) == (str(dest), "dst.txt", FileType.FILE)
    assert dest.read_text() == "data"
    assert not (workdir / "src.txt").exists()


def test_move_directory_and_symlink(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "dir").mkdir()
    (workdir / "dir" / "f").write_text("x")
    fs_proto.move(MoveRequest(source=str(workdir / "dir"), destination=str(workdir / "moved")))
    assert (workdir / "moved" / "f").read_text() == "x"
    (workdir / "link").symlink_to("moved")
    entry = fs_proto.move(
        MoveRequest(source=str(workdir / "link"), destination=str(workdir / "link2"))
    ).entry
    assert entry is not None
    assert (workdir / "link2").is_symlink()
    assert entry.symlink_target == str(workdir / "moved")


def test_move_missing_source(fs: FilesystemClientSync, workdir: Path) -> None:
    with pytest.raises(ConnectError) as err:
        fs.move(MoveRequest(source=str(workdir / "nope"), destination=str(workdir / "x" / "y")))
    assert err.value.code == Code.NOT_FOUND
    assert "source file not found" in err.value.message
    assert (workdir / "x").is_dir()  # parents are created before the rename, as in Go


def test_move_onto_non_empty_dir_is_internal(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "a").mkdir()
    (workdir / "b").mkdir()
    (workdir / "b" / "f").write_text("")
    with pytest.raises(ConnectError) as err:
        fs.move(MoveRequest(source=str(workdir / "a"), destination=str(workdir / "b")))
    assert err.value.code == Code.INTERNAL


def test_remove_tree_missing_and_symlink(fs: FilesystemClientSync, workdir: Path) -> None:
    tree = workdir / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("")
    fs.remove(RemoveRequest(path=str(tree)))
    assert not tree.exists()
    fs.remove(RemoveRequest(path=str(tree)))  # missing: success
    (workdir / "keep").mkdir()
    (workdir / "keep" / "f").write_text("")
    (workdir / "link").symlink_to("keep")
    fs.remove(RemoveRequest(path=str(workdir / "link")))
    assert not (workdir / "link").is_symlink()
    assert (workdir / "keep" / "f").exists()


def test_removed_path_is_gone_for_stat(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "f").write_text("")
    fs.remove(RemoveRequest(path=str(workdir / "f")))
    with pytest.raises(ConnectError) as err:
        fs.stat(StatRequest(path=str(workdir / "f")))
    assert err.value.code == Code.NOT_FOUND
