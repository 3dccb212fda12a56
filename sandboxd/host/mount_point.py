"""A directory to mount onto inside a tree a sandbox wrote (its root filesystem), made where
missing and opened without a link ever leading out of the tree.

The path is resolved as in a process chrooted into the tree, as nspawn resolves its --bind
destinations (`chase_symlinks` with CHASE_PREFIX_ROOT|CHASE_NONEXISTENT, then the missing
directories made): the tree's links are followed, an absolute one from the tree's top and `..`
never above it, and a link to nothing leads to where its target would be, made there. The walk
is one component at a time from open directory fds (openat with O_NOFOLLOW, readlinkat, mkdirat
in the directory just opened), and the caller mounts onto the returned fd, so nothing is looked
up by path on the host, then or between the check and the mount.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from sandboxd.host import libc

if TYPE_CHECKING:
    from pathlib import Path

MODE = 0o755
MAX_LINKS = 40  # as the kernel's path walk (ELOOP past it)
_ENTRY = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(root: Path, path: str, owner: int) -> int:
    """An fd (O_PATH) of directory `path` (absolute) inside `root`, resolved as if `root` were
    `/`, each missing directory on the way made, mode 0755, by `owner` (host uid and gid: the
    sandbox's root; also inside a volume mounted there before, where it is stored as 0). Runs
    as root, while nothing else changes the tree. The caller closes it.

    Raises:
        OSError: a component is not a directory (ENOTDIR), more than MAX_LINKS links (ELOOP),
            or the path resolves to the tree's top itself (EBUSY: a mount there would replace
            the whole tree).
    """
    stack = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]  # the top, then each step
    try:
        _walk(stack, deque(PurePosixPath(path).parts[1:]), owner)
        if len(stack) == 1:
            raise OSError(errno.EBUSY, f"{path} is the root directory itself")
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


def _walk(stack: list[int], todo: deque[str], owner: int) -> None:
    """Resolve `todo`'s components from the directory `stack[-1]`, pushing each directory's fd
    (`..` pops one, never the top; a link's target is walked instead of it)."""
    links = 0
    while todo:
        part = todo.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if len(stack) > 1:
                os.close(stack.pop())
            continue
        fd = _entry(stack[-1], part, owner)
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            target = os.readlink(part, dir_fd=stack[-1])
            os.close(fd)
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, f"more than {MAX_LINKS} links")
            todo.extendleft(reversed(target.split("/")))
            if target.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop())
            continue
        stack.append(fd)
        if not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, f"{part} is not a directory")


def _entry(parent: int, name: str, owner: int) -> int:
    """`name` in the directory `parent`, itself if a link: opened, or made a directory by
    `owner`, 0755 whatever the umask, if missing."""
    try:
        return os.open(name, _ENTRY, dir_fd=parent)
    except FileNotFoundError:
        pass
    with libc.filesystem_ids(owner):
        os.mkdir(name, MODE, dir_fd=parent)
        made = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent)  # fmt: skip
        try:
            os.fchmod(made, MODE)
        except OSError:
            os.close(made)
            raise
    return made
