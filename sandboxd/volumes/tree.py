"""A volume's files as the content API reaches them, confined to the volume whatever its tree
holds. Sandboxes write that tree, so it is hostile: every path is resolved by the kernel from a
descriptor of the volume's root (openat2 with RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS and
RESOLVE_NO_XDEV), so no symbolic link is followed, no `..` climbs out and no mount inside is
entered; the last component is then worked on relative to its parent's descriptor, never by a
path that could be swapped meanwhile. Hard links stay inside: the volume is a filesystem of
its own (sandboxd.volumes.storage). Nothing is opened that could block (a FIFO) or that is not
a regular file or directory.

Paths are absolute within the volume (`/data/x`; a missing leading `/` is taken as one); `.`
and empty components are dropped, `..` is refused."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.errors import NotAllowed, PathExists, PathNotFound, SandboxError, VolumeNotFound
from sandboxd.host import libc

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

RESOLVE = (libc.RESOLVE_BENEATH | libc.RESOLVE_NO_SYMLINKS | libc.RESOLVE_NO_XDEV
           | libc.RESOLVE_NO_MAGICLINKS)  # fmt: skip
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# openat2's: RESOLVE_NO_SYMLINKS refuses a link anywhere (ELOOP), the last component too, which
# O_NOFOLLOW with O_DIRECTORY would answer as ENOTDIR instead.
WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
MAX_DEPTH = 10  # the reference's bound on a listing's depth
MAX_ID = 65535  # canonical ids: those of one sandbox's range (sandboxd.volumes.storage)


@dataclass(frozen=True)
class Ownership:
    """Who owns what a write or make_dir creates, and its permission bits (None: the default
    for a new entry, left as it is for an existing one)."""

    uid: int | None = None
    gid: int | None = None
    mode: int | None = None

    def check(self) -> None:
        """Raises NotAllowed: an id outside a sandbox's range, or mode bits past 0o7777."""
        for name, value, top in (("uid", self.uid, MAX_ID), ("gid", self.gid, MAX_ID),
                                 ("mode", self.mode, 0o7777)):  # fmt: skip
            if value is not None and not 0 <= value <= top:
                raise NotAllowed(f"{name} must be between 0 and {top}")

    def apply(self, fd: int, created: bool, default_mode: int, default_id: int) -> None:
        """Set them on the entry open as `fd` (the defaults too when it was just `created`)."""
        uid = self.uid if self.uid is not None or not created else default_id
        gid = self.gid if self.gid is not None or not created else default_id
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        mode = self.mode if self.mode is not None or not created else default_mode
        if mode is not None:
            os.fchmod(fd, mode)


@dataclass(frozen=True)
class Entry:
    """One file, directory or link: `path` is absolute within the volume."""

    path: str
    st: os.stat_result
    target: str | None = None  # a symbolic link's

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1] or "/"


def parts_of(path: str) -> tuple[str, ...]:
    """The components of `path`.

    Raises:
        NotAllowed: a `..` component or a NUL byte.
    """
    if "\0" in path:
        raise NotAllowed("path must not contain NUL bytes")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise NotAllowed("path must not contain '..' components")
    return parts


def shown(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


def refusal(exc: OSError, parts: tuple[str, ...]) -> SandboxError:
    """What a failed system call on `parts` means to the caller."""
    where = shown(parts)
    known: dict[int, SandboxError] = {
        errno.ENOENT: PathNotFound(f"path '{where}' not found"),
        errno.EEXIST: PathExists(f"path '{where}' already exists"),
        errno.ENOTDIR: NotAllowed(f"path '{where}' goes through something not a directory"),
        errno.ELOOP: NotAllowed(f"path '{where}' goes through a symbolic link"),
        errno.EXDEV: NotAllowed(f"path '{where}' leaves the volume"),
        errno.EISDIR: NotAllowed(f"path '{where}' is a directory"),
        errno.ENOTEMPTY: PathExists(f"path '{where}' is a directory that is not empty"),
    }
    if exc.errno in known:
        return known[exc.errno]
    return SandboxError(f"{where}: {exc.strerror}")


@contextlib.contextmanager
def refused_as(parts: tuple[str, ...]) -> Iterator[None]:
    """OSErrors of the block raised as what they mean (`refusal`)."""
    try:
        yield
    except OSError as exc:
        raise refusal(exc, parts) from exc


class VolumeTree:
    """The files of the volume mounted at `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextlib.contextmanager
    def opened_root(self) -> Iterator[int]:
        """A descriptor of the volume's root.

        Raises:
            VolumeNotFound: the volume is not mounted (its mount point is never written).
        """
        try:
            fd = os.open(self.root, DIR_FLAGS)
        except FileNotFoundError:
            raise VolumeNotFound from None
        try:
            if os.fstat(fd).st_dev == os.stat(self.root.parent).st_dev:
                raise VolumeNotFound
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def directory(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the directory at `parts`.

        Raises:
            PathNotFound, NotAllowed: see `refusal`.
        """
        with self.opened_root() as root:
            if not parts:
                fd = os.dup(root)
            else:
                with refused_as(parts):
                    fd = libc.openat2(root, "/".join(parts), WALK_FLAGS, RESOLVE)
            try:
                yield fd
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def parent(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the directory holding the last of `parts` (not empty)."""
        with self.directory(parts[:-1]) as fd:
            yield fd

    def stat(self, path: str) -> Entry:
        """Raises PathNotFound, NotAllowed."""
        parts = parts_of(path)
        if not parts:
            with self.opened_root() as root:
                return Entry("/", os.fstat(root))
        with self.parent(parts) as fd, refused_as(parts):
            return entry_at(fd, parts)

    def list(self, path: str, depth: int) -> list[Entry]:
        """The entries below the directory `path`, `depth` levels down, in pre-order.

        Raises:
            PathNotFound: no such directory (a file too).
            NotAllowed: depth past MAX_DEPTH, or a refused path.
        """
        if depth > MAX_DEPTH:
            raise NotAllowed(f"depth must be at most {MAX_DEPTH}")
        parts = parts_of(path)
        if not stat.S_ISDIR(self.stat(path).st.st_mode):
            raise PathNotFound(f"path '{shown(parts)}' is not a directory")
        found: list[Entry] = []
        with self.directory(parts) as fd:
            _list_into(found, fd, parts, max(depth, 1), os.fstat(fd).st_dev)
        return found

    def remove(self, path: str) -> None:
        """Remove the entry at `path`, a directory with everything in it.

        Raises:
            NotAllowed: the root, or a refused path.
            PathNotFound: nothing there.
        """
        parts = parts_of(path)
        if not parts:
            raise NotAllowed("cannot remove the volume's root")
        with self.parent(parts) as fd, refused_as(parts):
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                # fd-based: it opens each directory below without following links
                shutil.rmtree(parts[-1], dir_fd=fd)
            else:
                os.unlink(parts[-1], dir_fd=fd)

    def update(self, path: str, owner: Ownership) -> Entry:
        """Set the given fields of `owner` on the entry at `path` (a link's ids, not its mode).

        Raises:
            PathNotFound: nothing there.
            NotAllowed: the mode of a link, or a refused path.
        """
        owner.check()
        parts = parts_of(path)
        with self.directory(parts[:-1]) as fd, refused_as(parts):
            name = parts[-1] if parts else "."
            if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                if owner.mode is not None:
                    raise NotAllowed(f"path '{shown(parts)}' is a symbolic link: it has no mode")
                os.chown(name, _or_keep(owner.uid), _or_keep(owner.gid), dir_fd=fd,
                         follow_symlinks=False)  # fmt: skip
            else:
                target = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    # fchown and fchmod refuse O_PATH descriptors; their /proc name is the
                    # inode itself, whatever replaced the name meanwhile.
                    proc = f"/proc/self/fd/{target}"
                    os.chown(proc, _or_keep(owner.uid), _or_keep(owner.gid))
                    if owner.mode is not None:
                        os.chmod(proc, owner.mode)
                finally:
                    os.close(target)
        return self.stat(path)


def _or_keep(value: int | None) -> int:
    return -1 if value is None else value


def entry_at(fd: int, parts: tuple[str, ...]) -> Entry:
    """The entry named by the last of `parts` in the directory `fd` (a link not followed).

    Raises:
        OSError: as lstat.
    """
    st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    target = os.readlink(parts[-1], dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
    return Entry(shown(parts), st, target)


def _list_into(
    found: list[Entry], fd: int, parts: tuple[str, ...], depth: int, device: int
) -> None:
    """Append the entries of the directory `fd` (at `parts`), and those of its directories
    down to `depth` levels, skipping what another filesystem mounts there."""
    with os.scandir(fd) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            found.append(entry_at(fd, (*parts, name)))
        if depth <= 1 or not stat.S_ISDIR(found[-1].st.st_mode) or found[-1].name != name:
            continue
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError:  # replaced by a link or a file meanwhile
            continue
        try:
            if os.fstat(child).st_dev == device:
                _list_into(found, child, (*parts, name), depth - 1, device)
        finally:
            os.close(child)
