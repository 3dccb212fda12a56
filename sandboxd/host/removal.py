"""Removing directory trees that something may be mounted in (an overlay root, or the /proc,
/sys and /dev a chrooted build step bound into an image). rm -rf descends into mount points: a
bind of the host's /dev inside an image directory would empty the host's /dev. So every tree is
detached from all mounts first, and never removed while anything is still mounted in it."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
from typing import TYPE_CHECKING

from sandboxd.errors import TeardownError
from sandboxd.host import libc

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("sandboxd.host.removal")


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace, deepest first."""
    prefix = str(path).rstrip("/")
    with open("/proc/self/mountinfo") as f:
        points = [_unescape(line.split()[4]) for line in f]
    inside = {p for p in points if p == prefix or p.startswith(prefix + "/")}
    return sorted(inside, key=lambda p: p.count("/"), reverse=True)


def bound_somewhere(path: Path) -> bool:
    """Whether `path` is the root of a bind mount anywhere in this mount namespace (a template
    layer a running sandbox has idmapped): a mount of the same filesystem whose root within it
    is `path`."""
    st = os.stat(path)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    top = path = path.absolute()
    while top != top.parent and os.stat(top.parent).st_dev == st.st_dev:
        top = top.parent
    within = "/" + str(path.relative_to(top)) if path != top else "/"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[2] == device and _unescape(fields[3]) == within and fields[4] != str(top):
                return True
    return False


def unmount(path: Path) -> None:
    """Unmount `path` if something is mounted there.

    Raises:
        TeardownError: the mount is busy (a process still uses it).
    """
    try:
        libc.umount(str(path))
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return  # not mounted (any more)
        raise TeardownError(f"cannot unmount {path}: {exc.strerror}") from exc


def detach_mounts(path: Path, *, below_only: bool = False) -> None:
    """Lazily unmount everything at or below `path` (umount -R -l), or only below it.

    Raises:
        TeardownError: something is still mounted there afterwards.
    """

    def points() -> list[str]:
        found = mounts_under(path)
        return [p for p in found if p != str(path).rstrip("/")] if below_only else found

    for _ in range(8):  # stacked mounts come off one layer per round
        if not (round_points := points()):
            return
        for point in round_points:
            with contextlib.suppress(OSError):
                libc.umount(point, libc.MNT_DETACH)
    if left := points():
        raise TeardownError(f"still mounted under {path}: {', '.join(left)}")


def remove_tree(path: Path) -> None:
    """rm -rf `path` after detaching every mount in it, also of files made immutable or
    append-only (a sandbox's root has CAP_LINUX_IMMUTABLE). Nothing to do if it is absent.

    Raises:
        TeardownError: a mount would not come off, or the tree could not be removed.
    """
    if not path.exists() and not path.is_symlink():
        return
    detach_mounts(path)
    if _rm_one_file_system(path) == 0:
        return
    subprocess.run(["chattr", "-R", "-ia", str(path)], capture_output=True, check=False)
    if _rm_one_file_system(path) != 0:
        raise TeardownError(f"cannot remove {path} (see the log for rm's reasons)")


def _rm_one_file_system(path: Path) -> int:
    """rm -rf that never crosses into another filesystem: the second guard, should a mount
    appear after detach_mounts() looked (one made in another mount namespace is not listed)."""
    result = subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, check=False
    )
    if result.returncode != 0:
        log.warning("rm %s: %s", path, result.stderr.decode(errors="replace").strip())
    return result.returncode
