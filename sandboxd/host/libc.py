"""The few system calls Python 3.11's os module lacks (setns, unshare, mount, umount2, the new
mount API's open_tree, mount_setattr and move_mount, openat2, and setfsuid, setfsgid, capget
and capset), through ctypes."""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MNT_DETACH = 2
MS_RDONLY = 1
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 1 << 19

# The new mount API has no libc wrappers in glibc 2.36: raw system calls (x86-64 numbers).
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
SYS_OPENAT2 = 437
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
# openat2's resolve flags (linux/openat2.h)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    """struct mount_attr (linux/mount.h), MOUNT_ATTR_SIZE_VER0."""

    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


class _OpenHow(ctypes.Structure):
    """struct open_how (linux/openat2.h)."""

    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


class _CapHeader(ctypes.Structure):
    """struct __user_cap_header_struct (linux/capability.h)."""

    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    """struct __user_cap_data_struct; version 3 takes two of them (capabilities 0-63)."""

    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def setns(fd: int, nstype: int) -> None:
    """Move the calling thread (only that thread) into the namespace `fd` refers to."""
    _check(_libc.setns(fd, nstype), "setns")


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (CLONE_NEWUSER needs a single thread:
    call it between fork and exec)."""
    _check(_libc.unshare(flags), "unshare")


def mount(source: str, target: str, fstype: str, options: str, flags: int = 0) -> None:
    _check(
        _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, options.encode()),
        f"mount {fstype} on {target}",
    )


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def idmapped_bind(
    source: str, target: str | int, userns_fd: int, *, writable: bool = False
) -> None:
    """Bind `source` (recursively) at `target`, read-only unless `writable` (then nosuid and
    nodev), its ownership shown through the uid/gid maps of the user namespace `userns_fd`:
    on-disk uid N appears as the host uid that namespace maps N to, and a file that uid writes
    is stored as N. `target` is a path, or an open directory's fd: the mount goes onto that
    very directory, no path walked again. The mount keeps a reference to the namespace, so
    the fd may be closed afterwards."""
    tree = _check(
        _libc.syscall(
            SYS_OPEN_TREE, AT_FDCWD, source.encode(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
        ),
        f"open_tree {source}",
    )  # fmt: skip
    try:
        access = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV if writable else MOUNT_ATTR_RDONLY
        attr = _MountAttr(MOUNT_ATTR_IDMAP | access, 0, 0, userns_fd)
        _check(
            _libc.syscall(
                SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
            ),
            f"mount_setattr (idmap) {source}",
        )  # fmt: skip
        if isinstance(target, int):
            to_fd, to_path, flags = target, b"", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
        else:
            to_fd, to_path, flags = AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH
        _check(
            _libc.syscall(SYS_MOVE_MOUNT, tree, b"", to_fd, to_path, flags),
            f"move_mount of {source}",
        )
    finally:
        os.close(tree)


def openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    """os.open(path, flags, dir_fd=dir_fd) with openat2's `resolve` restrictions on the walk
    (RESOLVE_*), e.g. never through a symbolic link, never out of `dir_fd`."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    return _check(
        _libc.syscall(SYS_OPENAT2, dir_fd, path.encode(), ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how))),
        f"openat2 {path}",
    )  # fmt: skip


def open_in_root(root_fd: int, path: str, flags: int) -> int:
    """Open `path` as if the directory `root_fd` were `/`: absolute links and `..` resolve
    inside it, never above (RESOLVE_IN_ROOT; no /proc magic links either).

    Raises:
        OSError: as open(2) (ELOOP for a last component that is a link with O_NOFOLLOW).
    """
    return openat2(root_fd, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)


@contextlib.contextmanager
def filesystem_ids(uid: int) -> Iterator[None]:
    """The calling thread (only it) creates files as `uid` (uid and gid) for the block, with
    its capabilities kept: what it makes is `uid`'s, also through an idmapped mount that maps
    `uid` and not root (where root's creations fail with EOVERFLOW). The kernel drops the
    filesystem capabilities from a thread whose fsuid leaves 0; they are raised again from its
    permitted set, and come back by themselves when its fsuid returns to 0."""
    _libc.setfsgid(uid)
    _libc.setfsuid(uid)
    try:
        header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
        _check(_libc.capget(ctypes.byref(header), data), "capget")
        for half in data:
            half.effective = half.permitted
        _check(_libc.capset(ctypes.byref(header), data), "capset")
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)
