"""ListDir over the wire (§6.4): depth, order, symlinks, errors, undecodable names."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import FileType, ListDirRequest, RemoveRequest
from tests.client import AS_USER

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync
    from tests.envd_process import EnvdProcess


def _names(fs: FilesystemClientSync, path: str, depth: int = 0) -> list[str]:
    entries = fs.list_dir(ListDirRequest(path=path, depth=depth)).entries
    return [os.path.relpath(e.path, path) for e in entries]


@pytest.fixture
def sdk_tree(workdir: Path) -> Path:
    """The SDK list test's layout."""
    for d in ("subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2/subdir2_1"):
        (workdir / d).mkdir(parents=True)
    (workdir / "file1.txt").write_text("")
    (workdir / "subdir1" / "subdir1_1" / "deep.txt").write_text("")
    return workdir


def test_depth(fs: FilesystemClientSync, sdk_tree: Path) -> None:
    assert _names(fs, str(sdk_tree)) == ["file1.txt", "subdir1", "subdir2"]
    assert _names(fs, str(sdk_tree), 1) == ["file1.txt", "subdir1", "subdir2"]
    assert _names(fs, str(sdk_tree), 2) == [
        "file1.txt",
        "subdir1",
        "subdir1/subdir1_1",
        "subdir1/subdir1_2",
        "subdir2",
        "subdir2/subdir2_1",
    ]
    assert "subdir1/subdir1_1/deep.txt" in _names(fs, str(sdk_tree), 3)


def test_byte_order_not_case_folded(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    for name in ("b", "B", "a", "_", "é"):
        (workdir / name).write_text("")
    assert _names(fs_proto, str(workdir)) == ["B", "_", "a", "b", "é"]


def test_symlinks_inside_are_listed_not_followed(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "real-dir").mkdir()
    (workdir / "real-dir" / "file.txt").write_text("")
    (workdir / "real-file.txt").write_text("")
    (workdir / "link-dir").symlink_to("real-dir")
    (workdir / "link-file").symlink_to("real-file.txt")
    (workdir / "cyclic").symlink_to("cyclic")
    entries = fs.list_dir(ListDirRequest(path=str(workdir), depth=5)).entries
    by_name = {os.path.relpath(e.path, workdir): e for e in entries}
    assert list(by_name) == [
        "cyclic",
        "link-dir",
        "link-file",
        "real-dir",
        "real-dir/file.txt",
        "real-file.txt",
    ]
    assert by_name["link-dir"].type == FileType.DIRECTORY
    assert by_name["cyclic"].type == FileType.UNSPECIFIED


def test_symlinked_root_lists_under_the_link(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "real").mkdir()
    (workdir / "real" / "f").write_text("")
    (workdir / "alias").symlink_to("real")
    entries = fs.list_dir(ListDirRequest(path=str(workdir / "alias"))).entries
    assert [e.path for e in entries] == [str(workdir / "alias" / "f")]


def test_root_errors(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "file").write_text("")
    (workdir / "to-file").symlink_to("file")
    (workdir / "loop").symlink_to("loop")
    cases = {
        "missing": Code.NOT_FOUND,
        "file": Code.INVALID_ARGUMENT,
        "to-file": Code.INVALID_ARGUMENT,
        "loop": Code.FAILED_PRECONDITION,
    }
    for name, code in cases.items():
        with pytest.raises(ConnectError) as err:
            fs.list_dir(ListDirRequest(path=str(workdir / name)))
        assert err.value.code == code, name
    with pytest.raises(ConnectError) as err:
        fs.list_dir(ListDirRequest(path=str(workdir / "loop")))
    assert err.value.message == f'cyclic symlink or chain >255 links at "{workdir / "loop"}"'


def test_relative_path_for_user(fs: FilesystemClientSync) -> None:
    entries = fs.list_dir(ListDirRequest(path="."), headers=AS_USER).entries
    assert all(e.path.startswith("/home/user/") for e in entries)
    assert [e.name for e in entries] == sorted(os.listdir("/home/user"), key=os.fsencode)


def test_undecodable_names_listed_with_replacement(
    envd: EnvdProcess, fs_proto: FilesystemClientSync, workdir: Path
) -> None:
    raw = os.fsencode(workdir) + b"/bad-\xff-name"
    with open(raw, "w"):
        pass
    (workdir / "good").write_text("")
    names = [e.name for e in fs_proto.list_dir(ListDirRequest(path=str(workdir))).entries]
    assert names == ["bad-\ufffd-name", "good"]
    # The same over JSON, checked on the raw bytes: valid UTF-8, no crash.
    r = httpx.post(
        f"{envd.url}/filesystem.Filesystem/ListDir",
        json={"path": str(workdir)},
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200
    assert "bad-\ufffd-name" in r.content.decode("utf-8")


def test_large_directory(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    big = workdir / "big"
    big.mkdir()
    for i in range(3000):  # bench.listdir times 10,000
        os.close(os.open(big / f"f{i:05}", os.O_CREAT | os.O_WRONLY, 0o644))
    entries = fs_proto.list_dir(ListDirRequest(path=str(big))).entries
    assert [e.name for e in entries] == [f"f{i:05}" for i in range(3000)]


def test_deeper_than_the_interpreter_recursion_limit(
    fs_proto: FilesystemClientSync, workdir: Path
) -> None:
    levels = 1500  # Python's default recursion limit is 1000
    subprocess.run(["mkdir", "-p", "/".join(["d"] * levels)], cwd=workdir, check=True)
    entries = fs_proto.list_dir(ListDirRequest(path=str(workdir), depth=levels + 5)).entries
    assert len(entries) == levels
    assert entries[-1].path == str(workdir / "/".join(["d"] * levels))
    fs_proto.remove(RemoveRequest(path=str(workdir / "d")))  # also iterative
    assert not (workdir / "d").exists()
