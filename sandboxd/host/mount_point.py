"""A directory to mount onto inside a tree a sandbox wrote (its root filesystem), made where
missing and opened without a link ever leading out of the tree.

The tree's own links are followed as a process chrooted into it would follow them, as nspawn
does for its --bind (`chase_symlinks` with CHASE_PREFIX_ROOT): `/mnt -> /srv` puts a mount at
`/mnt/data` on `/srv/data`. Every step is resolved from the tree's fd with openat2
RESOLVE_IN_ROOT, so an absolute link or `..` ends at the tree's top, never above it; a missing
directory is made with mkdirat in the directory just opened (a link by that name is not
followed: EEXIST); and the caller mounts onto the returned fd, so nothing is looked up by path
again between the check and the mount.
"""

from __future__ import annotations

import errno
import os
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from sandboxd.host import libc

if TYPE_CHECKING:
    from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY
MODE = 0o755


def open_dir(root: Path, path: str, owner: int) -> int:
    """An fd of directory `path` (absolute) inside `root`, resolved as if `root` were `/`, each
    missing directory on the way made, mode 0755, by `owner` (host uid and gid: the sandbox's
    root; also inside a volume mounted there before, where it is stored as 0). Runs as root.
    The caller closes it.

    Raises:
        OSError: a component is not a directory (ENOTDIR), a link to nothing (EEXIST), a /proc
            magic link (ELOOP), or the path resolves to the tree's top itself (EBUSY: a mount
            there would replace the whole tree).
    """
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    current = os.dup(root_fd)
    try:
        walked = PurePosixPath("/")
        for part in PurePosixPath(path).parts[1:]:
            walked /= part
            try:
                step = libc.open_in_root(root_fd, str(walked), _DIR)
            except FileNotFoundError:
                step = _made(current, part, root_fd, str(walked), owner)
            os.close(current)
            current = step
        if os.path.samestat(os.fstat(current), os.fstat(root_fd)):
            raise OSError(errno.EBUSY, f"{path} is the root directory itself")
    except BaseException:
        os.close(current)
        raise
    finally:
        os.close(root_fd)
    return current


def _made(parent: int, name: str, root_fd: int, walked: str, owner: int) -> int:
    """Directory `name` made in the directory `parent` by `owner` and opened (as `walked` from
    the top, refusing a link in its place), 0755 whatever the umask."""
    with libc.filesystem_ids(owner):
        os.mkdir(name, MODE, dir_fd=parent)
        made = libc.open_in_root(root_fd, walked, _DIR | os.O_NOFOLLOW)
        try:
            os.fchmod(made, MODE)
        except OSError:
            os.close(made)
            raise
    return made
