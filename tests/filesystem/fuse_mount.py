"""A real FUSE mount for tests: an empty root directory served straight from /dev/fuse in a
thread (INIT, GETATTR, STATFS; everything else ENOSYS). Enough for stat, statfs and an
inotify watch on the mount point; no libfuse needed. Root only."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_IN_HEADER: Final = struct.Struct("<IIQQIIII")  # len, opcode, unique, nodeid, uid, gid, pid, pad
_OUT_HEADER: Final = struct.Struct("<IiQ")  # len, error, unique
_FUSE_GETATTR, _FUSE_STATFS, _FUSE_INIT, _FUSE_DESTROY = 3, 17, 26, 38
_MNT_DETACH: Final = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _init_reply(body: bytes) -> bytes:
    _major, minor, max_readahead = struct.unpack_from("<III", body)
    # fuse_init_out: major, minor, max_readahead, flags, max_background, congestion_threshold,
    # max_write, time_gran, max_pages, map_alignment, flags2, unused[7]
    return struct.pack("<IIIIHHIIHHI28x", 7, minor, max_readahead, 0, 16, 12, 4096, 1, 1, 0, 0)


def _getattr_reply() -> bytes:
    # fuse_attr_out: attr_valid, attr_valid_nsec, dummy, then fuse_attr.
    attr = struct.pack(
        "<QQQQQQIIIIIIIIII", 1, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, 0, 0, 0, 4096, 0
    )
    return struct.pack("<QII", 1, 0, 0) + attr


def _statfs_reply() -> bytes:
    # fuse_kstatfs: blocks, bfree, bavail, files, ffree, bsize, namelen, frsize, padding, spare[6]
    return struct.pack("<QQQQQIIII24x", 0, 0, 0, 0, 0, 4096, 255, 4096, 0)


def _serve(fd: int) -> None:
    while True:
        try:
            request = os.read(fd, 1 << 20)
        except OSError:  # ENODEV once unmounted
            return
        _, opcode, unique, *_ = _IN_HEADER.unpack_from(request)
        body = request[_IN_HEADER.size :]
        if opcode == _FUSE_DESTROY:
            return
        if opcode == _FUSE_INIT:
            payload, error = _init_reply(body), 0
        elif opcode == _FUSE_GETATTR:
            payload, error = _getattr_reply(), 0
        elif opcode == _FUSE_STATFS:
            payload, error = _statfs_reply(), 0
        else:
            payload, error = b"", -errno.ENOSYS
        with contextlib.suppress(OSError):  # e.g. an interrupted request
            os.write(fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(payload), error, unique) + payload)


@contextlib.contextmanager
def fuse_mount(target: Path) -> Iterator[None]:
    """Mount an empty FUSE filesystem on `target` for the duration of the block."""
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if _libc.mount(b"envd-test", os.fsencode(target), b"fuse", 0, options) != 0:
        code = ctypes.get_errno()
        os.close(fd)
        raise OSError(code, os.strerror(code), str(target))
    server = threading.Thread(target=_serve, args=(fd,), daemon=True)
    server.start()
    try:
        yield
    finally:
        _libc.umount2(os.fsencode(target), _MNT_DETACH)
        os.close(fd)
        server.join(5)
