"""Stat over the wire: the EntryInfo fields as the reference envd fills them (§3.4)."""

from __future__ import annotations

import os
import socket
import stat
from typing import TYPE_CHECKING

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import FileType, StatRequest
from tests.client import AS_USER

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync


def test_regular_file(fs: FilesystemClientSync, workdir: Path) -> None:
    f = workdir / "a.txt"
    f.write_text("hello")
    f.chmod(0o640)
    os.utime(f, ns=(0, 1_700_000_000_123_456_789))
    entry = fs.stat(StatRequest(path=str(f))).entry
    assert entry is not None
    assert (entry.name, entry.path, entry.type) == ("a.txt", str(f), FileType.FILE)
    assert (entry.size, entry.mode, entry.permissions) == (5, 0o640, "-rw-r-----")
    assert (entry.owner, entry.group) == ("root", "root")
    assert entry.modified_time is not None
    assert (entry.modified_time.seconds, entry.modified_time.nanos) == (1_700_000_000, 123_456_789)
    assert not entry.has_field("symlink_target")


def test_directory_and_special_files(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    d = workdir / "d"
    d.mkdir(mode=0o755)
    entry = fs_proto.stat(StatRequest(path=str(d))).entry
    assert entry is not None
    assert (entry.type, entry.mode, entry.permissions) == (FileType.DIRECTORY, 0o755, "drwxr-xr-x")
    assert entry.size > 0

    def permissions(path: str) -> str:
        e = fs_proto.stat(StatRequest(path=path)).entry
        assert e is not None
        return e.permissions

    assert permissions("/tmp") == "dtrwxrwxrwx"
    assert permissions("/dev/null") == "Dcrw-rw-rw-"
    fifo = workdir / "fifo"
    os.mkfifo(fifo, 0o644)
    assert permissions(str(fifo)) == "prw-r--r--"
    setuid = workdir / "setuid"
    setuid.write_text("")
    setuid.chmod(0o4755)
    assert permissions(str(setuid)) == "urwxr-xr-x"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(workdir / "sock"))
        os.chmod(workdir / "sock", 0o700)
        assert permissions(str(workdir / "sock")) == "Srwx------"
    null = fs_proto.stat(StatRequest(path="/dev/null")).entry
    assert null is not None
    assert null.type == FileType.UNSPECIFIED


def test_symlink_reports_target_type_and_mode(fs: FilesystemClientSync, workdir: Path) -> None:
    target = workdir / "target.txt"
    target.write_text("x")
    target.chmod(0o644)
    link = workdir / "link"
    link.symlink_to("target.txt")
    entry = fs.stat(StatRequest(path=str(link))).entry
    assert entry is not None
    assert (entry.type, entry.mode, entry.path) == (FileType.FILE, 0o644, str(link))
    assert entry.permissions == "Lrwxrwxrwx"
    assert entry.size == len("target.txt")  # lstat size: the link itself
    assert entry.symlink_target == str(target)


def test_dangling_symlink(fs: FilesystemClientSync, workdir: Path) -> None:
    link = workdir / "dangling"
    link.symlink_to("nowhere")
    entry = fs.stat(StatRequest(path=str(link))).entry
    assert entry is not None
    assert (entry.type, entry.mode) == (FileType.UNSPECIFIED, 0)
    assert entry.symlink_target == str(link)


def test_unknown_owner_is_numeric(fs: FilesystemClientSync, workdir: Path) -> None:
    f = workdir / "orphan"
    f.write_text("")
    os.chown(f, 54321, 54322)
    entry = fs.stat(StatRequest(path=str(f))).entry
    assert entry is not None
    assert (entry.owner, entry.group) == ("54321", "54322")


def test_metadata_from_e2b_xattrs_only(fs: FilesystemClientSync, workdir: Path) -> None:
    f = workdir / "meta"
    f.write_text("")
    try:
        os.setxattr(f, "user.e2b.owner", b"alice")
    except OSError as exc:
        pytest.fail(f"the test directory's filesystem has no user xattrs: {exc}")
    os.setxattr(f, "user.other", b"ignored")
    os.setxattr(f, "user.e2b.binary", b"\xff\xfe")  # not UTF-8: skipped
    entry = fs.stat(StatRequest(path=str(f))).entry
    assert entry is not None
    assert entry.metadata == {"owner": "alice"}


def test_missing_is_not_found(fs: FilesystemClientSync, workdir: Path) -> None:
    with pytest.raises(ConnectError) as err:
        fs.stat(StatRequest(path=str(workdir / "missing")))
    assert err.value.code == Code.NOT_FOUND
    assert "file not found" in err.value.message


def test_relative_path_resolves_under_user_home(fs: FilesystemClientSync) -> None:
    entry = fs.stat(StatRequest(path=""), headers=AS_USER).entry
    assert entry is not None
    assert entry.path == "/home/user"
    assert entry.owner == "user"


def test_user_can_stat_root_only_files(fs: FilesystemClientSync) -> None:
    # envd does file work as root; the user only shapes path resolution (§3.1).
    entry = fs.stat(StatRequest(path="/etc/shadow"), headers=AS_USER).entry
    assert entry is not None
    assert stat.S_IMODE(os.stat("/etc/shadow").st_mode) == entry.mode


@pytest.mark.root
def test_go_mode_letters_for_devices_and_flags(fs: FilesystemClientSync, workdir: Path) -> None:
    block = workdir / "block"
    os.mknod(block, stat.S_IFBLK | 0o660, os.makedev(7, 250))
    block.chmod(0o660)  # past the umask
    flagged = workdir / "flagged"
    flagged.mkdir()
    flagged.chmod(0o3777)  # setgid + sticky: Go writes letters, never s/t in the rwx part
    for path, expected in ((block, "Drw-rw----"), (flagged, "dgtrwxrwxrwx")):
        entry = fs.stat(StatRequest(path=str(path))).entry
        assert entry is not None
        assert entry.permissions == expected
        assert entry.mode == stat.S_IMODE(os.lstat(path).st_mode) & 0o777
