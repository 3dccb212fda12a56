"""Making directories and reading and writing files in a volume, confined as
sandboxd.volumes.tree confines every path.

What the content API creates without ids or mode belongs to the sandbox's `user` (OWNER), a
file 0644 and a directory 0755: inside a sandbox `user` owns it, as E2B's SDKs expect of what
they write. Without `force` a write refuses a path that exists (O_EXCL) and a missing parent;
with it the file is truncated and its missing parents are made (as make_dir's `force` makes
them)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from sandboxd.errors import NotAllowed, PathExists, VolumeFull
from sandboxd.host import libc
from sandboxd.volumes.storage import OWNER
from sandboxd.volumes.tree import (
    DIR_FLAGS,
    RESOLVE,
    WALK_FLAGS,
    Entry,
    Ownership,
    VolumeTree,
    parts_of,
    refused_as,
    shown,
)

FILE_MODE = 0o644
DIR_MODE = 0o755
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Never blocks on a FIFO a sandbox left there (a write open of one without a reader fails ENXIO).
_OLD_FILE = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def make_dir(tree: VolumeTree, path: str, owner: Ownership, *, force: bool) -> Entry:
    """Make the directory `path`; with `force` its missing parents too, and an existing
    directory there is no error.

    Raises:
        PathExists: something is there (without `force`: anything; with it: not a directory).
        PathNotFound: a parent is missing (without `force`).
        NotAllowed: a refused path or ownership.
    """
    owner.check()
    parts = parts_of(path)
    with tree.opened_root() as root:
        if force:
            os.close(_make_parents(root, parts, owner))
        elif not parts:
            raise PathExists("path '/' already exists")
        else:
            with tree.parent(parts) as fd, refused_as(parts):
                os.mkdir(parts[-1], 0o700, dir_fd=fd)
                child = os.open(parts[-1], DIR_FLAGS, dir_fd=fd)
                try:
                    owner.apply(child, True, DIR_MODE, OWNER)
                finally:
                    os.close(child)
    return tree.stat(path)


def _make_parents(root: int, parts: tuple[str, ...], owner: Ownership) -> int:
    """mkdir -p from `root`, one component at a time (each opened without following a link);
    the directories made get `owner`. Returns a descriptor of the last.

    Raises:
        PathExists: a component is something other than a directory.
        NotAllowed: a component is a link.
    """
    fd = os.dup(root)
    try:
        for i, name in enumerate(parts):
            with refused_as(parts[: i + 1]):
                child = _next_dir(root, fd, name, owner)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _next_dir(root: int, fd: int, name: str, owner: Ownership) -> int:
    """The directory `name` in `fd`, made if missing.

    Raises:
        OSError: EEXIST for something not a directory, ELOOP for a link, EXDEV for a mount.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
        created = True
    except FileExistsError:
        created = False
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
    except NotADirectoryError:  # O_DIRECTORY's answer for a link too
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        code = errno.ELOOP if stat.S_ISLNK(mode) else errno.EEXIST
        raise OSError(code, os.strerror(code)) from None
    try:
        if created:
            owner.apply(child, True, DIR_MODE, OWNER)
        elif os.fstat(child).st_dev != os.fstat(root).st_dev:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
    except BaseException:
        os.close(child)
        raise
    return child


class Upload:
    """A file of a volume being written: `write` its bytes, then `finish` (or `abort`, which
    removes it if it was new)."""

    def __init__(self, path: str, parent: int, fd: int, *, created: bool) -> None:
        self.path = path
        self._parent = parent
        self._fd = fd
        self._created = created

    def write(self, data: bytes | bytearray) -> None:
        """Raises VolumeFull: no room left (ENOSPC, or EDQUOT)."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise VolumeFull("the volume is full: no space left on its filesystem") from None
            raise

    def finish(self) -> Entry:
        """The file as written."""
        try:
            return Entry(self.path, os.fstat(self._fd))
        finally:
            self._close()

    def abort(self) -> None:
        if self._created:
            with contextlib.suppress(OSError):
                os.unlink(self.path.rsplit("/", 1)[-1], dir_fd=self._parent)
        self._close()

    def _close(self) -> None:
        os.close(self._fd)
        os.close(self._parent)


def upload(tree: VolumeTree, path: str, owner: Ownership, *, force: bool) -> Upload:
    """Open the file `path` to be written from its start.

    Raises:
        PathExists: something is there (without `force`), or a directory (with it).
        PathNotFound: a parent is missing (without `force`).
        NotAllowed: a refused path or ownership, or not a regular file.
        VolumeFull: the volume's filesystem is full.
    """
    owner.check()
    parts = parts_of(path)
    if not parts:
        raise NotAllowed("path '/' is the volume's root")
    with tree.opened_root() as root, refused_as(parts[:-1]):
        parent = (_make_parents(root, parts[:-1], Ownership()) if force
                  else _open_parent(root, parts))  # fmt: skip
    try:
        fd, created = _open_file(parent, parts, force=force)
    except BaseException:
        os.close(parent)
        raise
    opened = Upload(shown(parts), parent, fd, created=created)
    try:
        owner.apply(fd, created, FILE_MODE, OWNER)
    except BaseException:
        opened.abort()
        raise
    return opened


def _open_parent(root: int, parts: tuple[str, ...]) -> int:
    if len(parts) == 1:
        return os.dup(root)
    return libc.openat2(root, "/".join(parts[:-1]), WALK_FLAGS, RESOLVE)


def _open_file(parent: int, parts: tuple[str, ...], *, force: bool) -> tuple[int, bool]:
    """(descriptor, whether it was made) of the regular file at `parts`, truncated."""
    name = parts[-1]
    with refused_as(parts):
        try:
            return os.open(name, _NEW_FILE, 0o600, dir_fd=parent), True
        except FileExistsError:
            if not force:
                raise
        try:
            fd = os.open(name, _OLD_FILE, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader
                raise NotAllowed(f"path '{shown(parts)}' is not a regular file") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotAllowed(f"path '{shown(parts)}' is not a regular file")
        os.ftruncate(fd, 0)
        return fd, False


def open_to_read(tree: VolumeTree, path: str) -> int:
    """A descriptor of the regular file `path` (the caller closes it).

    Raises:
        PathNotFound: nothing there.
        NotAllowed: a refused path, or not a regular file.
    """
    parts = parts_of(path)
    with tree.opened_root() as root, refused_as(parts):
        fd = libc.openat2(root, "/".join(parts) or ".", _READ, RESOLVE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotAllowed(f"path '{shown(parts)}' is not a regular file")
    return fd
