"""Which filesystem a path lives on: Go envd refuses to watch network filesystems, where
inotify misses changes made by other machines."""

from __future__ import annotations

import ctypes
import os
from typing import Final

from envd.libc import errno_error, libc

# statfs f_type of the network filesystems Go envd refuses to watch.
_NETWORK_FS_MAGIC: Final = {
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0x517B: "smb",
    0xFE534D42: "smb2",
    0x65735546: "fuse",
}


def _statfs_type(path: str) -> int:
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is the leading long
    if libc.statfs(os.fsencode(path), buf) != 0:
        raise errno_error(path)
    return ctypes.c_long.from_buffer(buf).value


def network_filesystem(path: str) -> str | None:
    """The name of the network filesystem `path` is on (nfs, cifs, fuse, ...), else None.

    Raises:
        OSError: statfs failed.
    """
    return _NETWORK_FS_MAGIC.get(_statfs_type(path) & 0xFFFFFFFF)
