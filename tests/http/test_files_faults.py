"""POST /files when things go wrong: clients that vanish mid-upload, cut or malformed multipart
bodies, a full disk, no free inodes; and the inotify footprint of a new file."""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest

from tests.http.small_tmpfs import small_tmpfs
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    import httpx

    from tests.envd_process import EnvdProcess

OCTET = {"Content-Type": "application/octet-stream"}
IN_MODIFY, IN_ATTRIB, IN_CREATE = 0x2, 0x4, 0x100


def _start_raw_upload(envd: EnvdProcess, path: str, declared: int, sent: bytes) -> socket.socket:
    """Send the headers and part of a Content-Length body, leaving the request unfinished."""
    sock = socket.create_connection(("127.0.0.1", envd.port))
    head = (
        f"POST /files?path={quote(path)} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n"
    )
    sock.sendall(head.encode() + sent)
    return sock


def test_disconnect_mid_upload_leaves_no_new_file(
    envd: EnvdProcess, http: httpx.Client, workdir: Path
) -> None:
    target = workdir / "vanishing.bin"
    sock = _start_raw_upload(envd, str(target), 10 * 1024 * 1024, b"x" * 300_000)
    wait_until(lambda: target.exists() and target.stat().st_size > 0, 10, "the upload to begin")
    sock.close()
    wait_until(lambda: not target.exists(), 10, "the partial upload to be removed")
    assert http.get("/health").status_code == 204


def test_disconnect_mid_overwrite_leaves_the_existing_file_partial(
    envd: EnvdProcess, http: httpx.Client, workdir: Path
) -> None:
    # Documented behaviour: existing files are written in place, like the reference envd.
    target = workdir / "existing.txt"
    target.write_bytes(b"original " * 1000)
    inode = target.stat().st_ino
    sock = _start_raw_upload(envd, str(target), 10 * 1024 * 1024, b"y" * 300_000)
    wait_until(lambda: target.read_bytes()[:1] == b"y", 10, "the overwrite to begin")
    sock.close()
    abandoned = f"upload to {target} abandoned: client disconnected"
    wait_until(lambda: abandoned in envd.logs(), 10, "envd to log the abandoned upload")
    # The file must simply stay as written.
    assert http.get("/health").status_code == 204
    content = target.read_bytes()
    assert 0 < len(content) <= 300_000
    assert set(content) == {ord("y")}
    assert target.stat().st_ino == inode


def _multipart_body(boundary: str, filename: str, data: bytes) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + data


def test_cut_multipart_body_is_400_and_leaves_no_file(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "cut.bin"
    body = _multipart_body("B", str(target), b"z" * 100_000)  # no closing boundary
    r = http.post(
        "/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 400
    assert r.json()["message"] == "error parsing multipart body: unexpected EOF"
    assert not target.exists()


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data; boundary=B", b"garbage without any boundary"),
        ("multipart/form-data; boundary=B", b"--B\r\nno-colon-header\r\n\r\nx\r\n--B--\r\n"),
        ("multipart/form-data", b"--B--\r\n"),
        ("multipart/form-data; boundary=B", b""),
        ("multipart/form-data; boundary=B", b"--B\r\nX: " + b"h" * (2 * 1024 * 1024)),
        # python-multipart refuses boundaries over 256 bytes (RFC 2046 allows 70).
        ("multipart/form-data; boundary=" + "b" * 300, b"--" + b"b" * 300 + b"--\r\n"),
    ],
)
def test_malformed_multipart_is_400(http: httpx.Client, content_type: str, body: bytes) -> None:
    r = http.post("/files", content=body, headers={"Content-Type": content_type})
    assert r.status_code == 400
    assert r.json()["message"].startswith("error parsing multipart body")


@pytest.mark.root
def test_full_disk(http: httpx.Client, workdir: Path) -> None:
    with small_tmpfs(workdir / "small", size="64k") as disk:
        existing = disk / "existing.txt"
        existing.write_bytes(b"small")
        (disk / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
        new = disk / "new.bin"
        r = http.post("/files", params={"path": str(new)}, content=b"n" * 65536, headers=OCTET)
        assert r.status_code == 507
        assert r.json()["message"] == (
            "attempted to write 65536 bytes: not enough disk space available"
        )
        assert not new.exists()
        # Truncating in place frees the old blocks first, so an overwrite still fits.
        r = http.post("/files", params={"path": str(existing)}, content=b"again", headers=OCTET)
        assert r.status_code == 200
        assert existing.read_bytes() == b"again"


@pytest.mark.root
def test_no_inodes(http: httpx.Client, workdir: Path) -> None:
    with small_tmpfs(workdir / "small", inodes=3) as disk:
        for i in range(10):
            try:
                (disk / f"f{i}").write_bytes(b"")
            except OSError:
                break
        target = disk / "one-too-many"
        r = http.post("/files", params={"path": str(target)}, content=b"x", headers=OCTET)
        assert r.status_code == 507
        assert r.json()["message"].startswith("not enough inodes available")


class _Inotify:
    """Just enough of inotify(7), through libc, to see what an upload does to a directory."""

    def __init__(self, directory: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0
        mask = 0xFFF  # every event kind
        assert self.libc.inotify_add_watch(self.fd, str(directory).encode(), mask) >= 0

    def events(self) -> list[tuple[int, str]]:
        found: list[tuple[int, str]] = []
        while select.select([self.fd], [], [], 0.2)[0]:
            data = os.read(self.fd, 65536)
            offset = 0
            while offset < len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].rstrip(b"\0").decode()
                found.append((mask, name))
                offset += 16 + length
        return found

    def close(self) -> None:
        os.close(self.fd)


def test_new_file_footprint_is_create_attrib_modify(http: httpx.Client, workdir: Path) -> None:
    watcher = _Inotify(workdir)
    try:
        r = http.post(
            "/files", params={"path": str(workdir / "new.txt")}, content=b"hi", headers=OCTET
        )
        assert r.status_code == 200
        events = watcher.events()
    finally:
        watcher.close()
    counted = [
        mask & (IN_CREATE | IN_ATTRIB | IN_MODIFY)
        for mask, name in events
        if name == "new.txt" and mask & (IN_CREATE | IN_ATTRIB | IN_MODIFY)
    ]
    assert counted == [IN_CREATE, IN_ATTRIB, IN_MODIFY]


def test_download_abandoned_midway_releases_the_file(
    envd: EnvdProcess, http: httpx.Client, workdir: Path
) -> None:
    target = workdir / "large.bin"
    target.write_bytes(b"\0" * (64 * 1024 * 1024))
    fds_before = envd.open_fds()
    sock = socket.create_connection(("127.0.0.1", envd.port))
    sock.sendall(f"GET /files?path={quote(str(target))} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    received = 0
    while received < 1024 * 1024:
        received += len(sock.recv(65536))
    sock.close()
    wait_until(lambda: envd.open_fds() <= fds_before, 10, "envd to close the file and socket")
    assert http.get("/health").status_code == 204
