"""The few system calls Python 3.11's os module lacks (setns, mount, umount2), through ctypes."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def setns(fd: int, nstype: int) -> None:
    """Move the calling thread (only that thread) into the namespace `fd` refers to."""
    _check(_libc.setns(fd, nstype), "setns")


def mount(source: str, target: str, fstype: str, options: str) -> None:
    _check(
        _libc.mount(source.encode(), target.encode(), fstype.encode(), 0, options.encode()),
        f"mount {fstype} on {target}",
    )


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")
