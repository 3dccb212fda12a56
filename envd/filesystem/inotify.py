"""A thin inotify(7) wrapper over libc: one non-blocking fd, add/remove watches, parse raw
events. No debouncing, no path bookkeeping (watcher.py does that)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass
from typing import Final

from envd.libc import errno_error, libc

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_ISDIR: Final = 0x40000000

_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC
_EVENT_HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_BYTES: Final = 64 * 1024

libc.inotify_init1.argtypes = [ctypes.c_int]
libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


@dataclass(frozen=True, slots=True)
class RawEvent:
    wd: int
    mask: int
    cookie: int
    name: bytes  # empty for events about the watched object itself


class Inotify:
    """One inotify instance.

    Raises:
        OSError: inotify_init1 failed (EMFILE when the per-user instance limit is reached).
    """

    def __init__(self) -> None:
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise errno_error()
        self.fd: int = fd

    def add_watch(self, path: str, mask: int) -> int:
        """Watch `path` (a directory) for `mask`; returns the watch descriptor."""
        wd = libc.inotify_add_watch(self.fd, os.fsencode(path), mask | IN_ONLYDIR)
        if wd < 0:
            raise errno_error(path)
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        # EINVAL: the kernel already dropped it (the directory was deleted); nothing to do.
        if libc.inotify_rm_watch(self.fd, wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            raise errno_error()

    def read_events(self) -> list[RawEvent]:
        """One read's worth of queued events; empty once the queue is drained (non-blocking)."""
        try:
            data = os.read(self.fd, _READ_BYTES)
        except BlockingIOError:
            return []
        events: list[RawEvent] = []
        offset = 0
        while offset < len(data):
            wd, mask, cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            start = offset + _EVENT_HEADER.size
            events.append(RawEvent(wd, mask, cookie, data[start : start + length].rstrip(b"\0")))
            offset = start + length
        return events

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
