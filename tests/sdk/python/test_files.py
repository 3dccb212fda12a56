"""Sandbox.files (sync API): uploads, downloads and filesystem RPCs through the real SDK."""

from __future__ import annotations

import hashlib
import io
import os
import time
from typing import TYPE_CHECKING

import pytest
from e2b import FileType, InvalidArgumentException, NotFoundException, Sandbox
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from tests.sdk.python.mode import DEFAULT_USER
from tests.sdk.python.shell import sh

if TYPE_CHECKING:
    from e2b.sandbox_sync.filesystem.watch_handle import WatchHandle

BINARY = bytes(range(256)) * 64 + b"\x00\xff\xfe"


def test_write_and_read_text(sandbox: Sandbox, workdir: str) -> None:
    path = f"{workdir}/hello.txt"
    info = sandbox.files.write(path, "héllo wörld\n")
    assert (info.name, info.path, info.type) == ("hello.txt", path, FileType.FILE)
    assert sandbox.files.read(path) == "héllo wörld\n"


def test_write_and_read_bytes(sandbox: Sandbox, workdir: str) -> None:
    path = f"{workdir}/blob.bin"
    sandbox.files.write(path, BINARY)
    assert sandbox.files.read(path, format="bytes") == bytearray(BINARY)


def test_write_file_object_and_chunk_iterator_read_as_stream(
    sandbox: Sandbox, workdir: str
) -> None:
    sandbox.files.write(f"{workdir}/from-file.bin", io.BytesIO(BINARY))
    chunks = [b"a" * 70_000, b"b" * 3, b"c" * 100_000]
    sandbox.files.write(f"{workdir}/from-iter.bin", iter(chunks))

    with sandbox.files.read(f"{workdir}/from-file.bin", format="stream") as stream:
        assert b"".join(stream) == BINARY
    with sandbox.files.read(f"{workdir}/from-iter.bin", format="stream") as stream:
        assert b"".join(stream) == b"".join(chunks)


def test_large_file_streams_both_ways(sandbox: Sandbox, workdir: str) -> None:
    block = os.urandom(1 << 20)
    sandbox.files.write(f"{workdir}/big.bin", iter([block] * 24))
    size = 0
    with sandbox.files.read(f"{workdir}/big.bin", format="stream") as stream:
        for chunk in stream:
            size += len(chunk)
    assert size == 24 << 20
    first_mib = sh(sandbox, f"head -c {1 << 20} {workdir}/big.bin | sha256sum").split()[0]
    assert first_mib == hashlib.sha256(block).hexdigest()


def test_write_several_files_at_once_creates_parents(sandbox: Sandbox, workdir: str) -> None:
    paths = [f"{workdir}/one.txt", f"{workdir}/deep/er/two.bin", f"{workdir}/deep/three.txt"]
    data = ["first", b"\x00second", io.StringIO("third")]
    infos = sandbox.files.write_files(
        [{"path": p, "data": d} for p, d in zip(paths, data, strict=True)]
    )
    assert sorted(i.path for i in infos) == sorted(paths)
    assert sandbox.files.read(f"{workdir}/one.txt") == "first"
    assert sandbox.files.read(f"{workdir}/deep/er/two.bin", format="bytes") == b"\x00second"
    assert sandbox.files.read(f"{workdir}/deep/three.txt") == "third"


def test_gzip_upload_and_gzip_download(sandbox: Sandbox, workdir: str) -> None:
    path = f"{workdir}/zipped.txt"
    text = "compress me " * 5000
    sandbox.files.write(path, text, gzip=True)
    assert sh(sandbox, f"stat -c %s {path}") == f"{len(text)}\n"  # stored decompressed
    assert sandbox.files.read(path, gzip=True) == text
    assert sandbox.files.read(path, format="bytes", gzip=True) == text.encode()


def test_exists(sandbox: Sandbox, workdir: str) -> None:
    sandbox.files.write(f"{workdir}/here.txt", "x")
    assert sandbox.files.exists(f"{workdir}/here.txt")
    assert sandbox.files.exists(workdir)
    assert not sandbox.files.exists(f"{workdir}/missing.txt")


def test_get_info_of_file_and_directory(sandbox: Sandbox, workdir: str) -> None:
    sandbox.files.write(f"{workdir}/f.txt", "12345", user="user")
    info = sandbox.files.get_info(f"{workdir}/f.txt")
    assert (info.name, info.path, info.type, info.size) == (
        "f.txt",
        f"{workdir}/f.txt",
        FileType.FILE,
        5,
    )
    assert (info.owner, info.group) == ("user", "user")
    assert info.permissions == "-rw-r--r--"
    assert abs(info.modified_time.timestamp() - time.time()) < 60

    sandbox.files.make_dir(f"{workdir}/d")
    dir_info = sandbox.files.get_info(f"{workdir}/d")
    assert dir_info.type == FileType.DIR
    assert dir_info.permissions == "drwxr-xr-x"
    assert dir_info.owner == DEFAULT_USER


def test_symlinks_are_reported_as_symlinks(sandbox: Sandbox, workdir: str) -> None:
    # SDK 2.63 shows an entry envd marks with is_symlink as SYMLINK, whatever the link points
    # to; symlink_target stays the resolved target (the link itself when dangling).
    sandbox.files.write(f"{workdir}/file.txt", "x")
    sandbox.files.make_dir(f"{workdir}/dir")
    sh(
        sandbox,
        f"cd {workdir} && ln -s file.txt to-file && ln -s dir to-dir && ln -s nowhere dangling",
    )
    infos = {n: sandbox.files.get_info(f"{workdir}/{n}") for n in ("to-file", "to-dir", "dangling")}
    assert {n: i.type for n, i in infos.items()} == dict.fromkeys(infos, FileType.SYMLINK)
    assert {n: i.symlink_target for n, i in infos.items()} == {
        "to-file": f"{workdir}/file.txt",
        "to-dir": f"{workdir}/dir",
        "dangling": f"{workdir}/dangling",
    }
    assert sandbox.files.get_info(f"{workdir}/file.txt").type == FileType.FILE

    # list() leaves out entries whose type (the target's) is unknown: the dangling link.
    listed = {e.name: e.type for e in sandbox.files.list(workdir)}
    assert listed == {
        "dir": FileType.DIR,
        "file.txt": FileType.FILE,
        "to-dir": FileType.SYMLINK,
        "to-file": FileType.SYMLINK,
    }
    moved = sandbox.files.rename(f"{workdir}/to-dir", f"{workdir}/dir-link")
    assert (moved.name, moved.type) == ("dir-link", FileType.SYMLINK)


def test_list_with_depth(sandbox: Sandbox, workdir: str) -> None:
    for rel in ("file1.txt", "subdir1/subdir1_1/a.txt", "subdir1/subdir1_2/b.txt", "subdir2/c.txt"):
        sandbox.files.write(f"{workdir}/{rel}", rel)

    depth1 = sandbox.files.list(workdir)
    assert [e.name for e in depth1] == ["file1.txt", "subdir1", "subdir2"]
    assert [e.type for e in depth1] == [FileType.FILE, FileType.DIR, FileType.DIR]

    depth2 = sandbox.files.list(workdir, depth=2)
    assert [os.path.relpath(e.path, workdir) for e in depth2] == [
        "file1.txt",
        "subdir1",
        "subdir1/subdir1_1",
        "subdir1/subdir1_2",
        "subdir2",
        "subdir2/c.txt",
    ]
    depth3 = sandbox.files.list(workdir, depth=3)
    assert len(depth3) == len(depth2) + 2


def test_make_dir(sandbox: Sandbox, workdir: str) -> None:
    assert sandbox.files.make_dir(f"{workdir}/a/b/c") is True
    sh(sandbox, f"test -d {workdir}/a/b/c")
    assert sandbox.files.make_dir(f"{workdir}/a/b/c") is False  # already exists


def test_rename(sandbox: Sandbox, workdir: str) -> None:
    sandbox.files.write(f"{workdir}/old.txt", "content")
    info = sandbox.files.rename(f"{workdir}/old.txt", f"{workdir}/moved/new.txt")
    assert (info.name, info.path) == ("new.txt", f"{workdir}/moved/new.txt")
    assert not sandbox.files.exists(f"{workdir}/old.txt")
    assert sandbox.files.read(f"{workdir}/moved/new.txt") == "content"


def test_remove_file_and_directory_tree(sandbox: Sandbox, workdir: str) -> None:
    sandbox.files.write(f"{workdir}/gone.txt", "x")
    sandbox.files.write(f"{workdir}/tree/sub/f.txt", "x")
    sandbox.files.remove(f"{workdir}/gone.txt")
    sandbox.files.remove(f"{workdir}/tree")
    assert sh(sandbox, f"ls -A {workdir}") == ""
    sandbox.files.remove(f"{workdir}/never-existed")  # a missing path is not an error


def test_metadata_round_trip(sandbox: Sandbox, workdir: str) -> None:
    path = f"{workdir}/tagged.txt"
    info = sandbox.files.write(path, "x", metadata={"owner": "alice", "stage": "draft"})
    assert info.metadata == {"owner": "alice", "stage": "draft"}
    assert sandbox.files.get_info(path).metadata == {"owner": "alice", "stage": "draft"}
    [listed] = sandbox.files.list(workdir)
    assert listed.metadata == {"owner": "alice", "stage": "draft"}
    sandbox.files.write(path, "y")  # an overwrite without metadata clears it
    assert sandbox.files.get_info(path).metadata is None


def test_missing_paths_raise_not_found(sandbox: Sandbox, workdir: str) -> None:
    missing = f"{workdir}/nope.txt"
    with pytest.raises(NotFoundException):
        sandbox.files.read(missing)
    with pytest.raises(NotFoundException):
        sandbox.files.read(missing, format="stream")
    with pytest.raises(NotFoundException):
        sandbox.files.get_info(missing)
    with pytest.raises(NotFoundException):
        sandbox.files.list(missing)
    with pytest.raises(NotFoundException):
        sandbox.files.rename(missing, f"{workdir}/other.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir(missing)


def test_directory_calls_on_a_file_are_invalid(sandbox: Sandbox, workdir: str) -> None:
    sandbox.files.write(f"{workdir}/plain.txt", "x")
    with pytest.raises(InvalidArgumentException, match="not a directory"):
        sandbox.files.list(f"{workdir}/plain.txt")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.watch_dir(f"{workdir}/plain.txt")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.make_dir(f"{workdir}/plain.txt")


def poll_events(
    handle: WatchHandle, want: int, timeout: float = 5.0
) -> list[tuple[FilesystemEventType, str]]:
    """Poll the watcher until at least `want` events arrived (or the timeout passed)."""
    events: list[tuple[FilesystemEventType, str]] = []
    deadline = time.monotonic() + timeout
    while len(events) < want and time.monotonic() < deadline:
        events += [(e.type, e.name) for e in handle.get_new_events()]
        time.sleep(0.05)
    time.sleep(0.2)  # let any unexpected extra event arrive too
    return events + [(e.type, e.name) for e in handle.get_new_events()]


def test_watch_dir_reports_create_write_chmod_rename_remove(sandbox: Sandbox, workdir: str) -> None:
    handle = sandbox.files.watch_dir(workdir)
    try:
        assert handle.get_new_events() == []
        sandbox.files.write(f"{workdir}/w.txt", "data")
        events = poll_events(handle, 3)
        assert events[0] == (FilesystemEventType.CREATE, "w.txt")
        assert set(events) == {
            (FilesystemEventType.CREATE, "w.txt"),
            (FilesystemEventType.CHMOD, "w.txt"),
            (FilesystemEventType.WRITE, "w.txt"),
        }

        sh(sandbox, f"chmod 600 {workdir}/w.txt")
        assert poll_events(handle, 1) == [(FilesystemEventType.CHMOD, "w.txt")]

        sandbox.files.rename(f"{workdir}/w.txt", f"{workdir}/r.txt")
        assert set(poll_events(handle, 2)) == {
            (FilesystemEventType.RENAME, "w.txt"),
            (FilesystemEventType.CREATE, "r.txt"),
        }

        sandbox.files.remove(f"{workdir}/r.txt")
        assert poll_events(handle, 1) == [(FilesystemEventType.REMOVE, "r.txt")]
    finally:
        handle.stop()


def test_watch_dir_recursion(sandbox: Sandbox, workdir: str) -> None:
    sh(sandbox, f"mkdir {workdir}/nested")
    flat = sandbox.files.watch_dir(workdir)
    deep = sandbox.files.watch_dir(workdir, recursive=True)
    try:
        sandbox.files.write(f"{workdir}/nested/file", "x")
        deep_events = poll_events(deep, 3)
        assert deep_events[0] == (FilesystemEventType.CREATE, "nested/file")
        assert (FilesystemEventType.WRITE, "nested/file") in deep_events
        # The flat watcher sees the directory's own change at most, never the nested file.
        assert all(name == "nested" for _, name in flat.get_new_events())
    finally:
        flat.stop()
        deep.stop()
