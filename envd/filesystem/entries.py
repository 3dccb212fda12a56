"""EntryInfo as the reference envd builds it (lstat based, symlinks described by their target
and marked with is_symlink).
ListDir writes the common entries itself (listing.py) and hands the rest to entry_from_lstat."""

from __future__ import annotations

import functools
import os
import posixpath
import stat
import time
from typing import TYPE_CHECKING, Final

from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from envd._gen.filesystem.filesystem_pb import EntryInfo, FileType
from envd.metadata import read_metadata
from envd.users import group_name, owner_name
from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from collections.abc import Callable

# Go's FileMode.String(): one letter per type/flag bit, in this order, then the rwx triplets.
_GO_MODE_LETTERS: Final = "dalTLDpSugct?"


class RootNotADirectoryError(ValueError):
    """ListDir was asked for something that resolves to a non-directory."""

    def __init__(self, root: str) -> None:
        super().__init__(f"path is not a directory: {root}")


@functools.lru_cache(maxsize=1024)  # few distinct modes; this runs once per entry
def go_permissions(mode: int) -> str:
    """Go's `FileMode.String()` for an lstat `st_mode` (not Python's `stat.filemode`)."""
    fmt = stat.S_IFMT(mode)
    flags = {
        "d": fmt == stat.S_IFDIR,
        "L": fmt == stat.S_IFLNK,
        "D": fmt in (stat.S_IFBLK, stat.S_IFCHR),
        "p": fmt == stat.S_IFIFO,
        "S": fmt == stat.S_IFSOCK,
        "u": bool(mode & stat.S_ISUID),
        "g": bool(mode & stat.S_ISGID),
        "c": fmt == stat.S_IFCHR,
        "t": bool(mode & stat.S_ISVTX),
    }
    letters = "".join(letter for letter in _GO_MODE_LETTERS if flags.get(letter)) or "-"
    rwx = "".join(char if mode & (1 << (8 - i)) else "-" for i, char in enumerate("rwxrwxrwx"))
    return letters + rwx


def file_type(mode: int) -> FileType:
    if stat.S_ISREG(mode):
        return FileType.FILE
    if stat.S_ISDIR(mode):
        return FileType.DIRECTORY
    return FileType.UNSPECIFIED


def entry_from_lstat(
    path: str,
    st: os.stat_result,
) -> EntryInfo:
    """Describe `path` from its lstat result; a symlink takes its final target's type and mode."""
    kind = file_type(st.st_mode)
    mode = st.st_mode & 0o777
    symlink_target: str | None = None
    is_symlink = stat.S_ISLNK(st.st_mode)
    if is_symlink:
        try:
            target_st = os.stat(path)
            kind, mode = file_type(target_st.st_mode), target_st.st_mode & 0o777
        except OSError:
            kind, mode = FileType.UNSPECIFIED, 0
        try:
            symlink_target = os.path.realpath(path, strict=True)
        except OSError:  # dangling or a loop: the reference reports the link itself
            symlink_target = path
    entry = EntryInfo(
        name=valid_utf8(posixpath.basename(path.rstrip("/")) or "/"),
        type=kind,
        path=valid_utf8(path),
        size=st.st_size,
        mode=mode,
        permissions=go_permissions(st.st_mode),
        owner=_owner_name(st.st_uid),
        group=_group_name(st.st_gid),
        metadata=read_metadata(path),
        is_symlink=is_symlink,
    )
    if st.st_mtime_ns:
        seconds, nanos = divmod(st.st_mtime_ns, 1_000_000_000)
        entry.modified_time = Timestamp(seconds=seconds, nanos=nanos)
    if symlink_target is not None:
        entry.symlink_target = valid_utf8(symlink_target)
    return entry


def entry_info(path: str) -> EntryInfo:
    """EntryInfo of `path` (not followed if it is a symlink).

    Raises:
        OSError: lstat failed.
    """
    return entry_from_lstat(path, os.lstat(path))


class _NameCache:
    """uid/gid → name, remembered briefly: a Stat or a 10k-entry listing would otherwise
    scan the passwd/group databases once per entry (about 20 µs each)."""

    TTL_S: Final = 1.0

    def __init__(self, lookup: Callable[[int], str]) -> None:
        self._lookup = lookup
        self._names: dict[int, tuple[float, str]] = {}

    def __call__(self, ident: int) -> str:
        now = time.monotonic()
        cached = self._names.get(ident)
        if cached is not None and now - cached[0] < self.TTL_S:
            return cached[1]
        if len(self._names) > 1024:  # many distinct owners: start over rather than grow
            self._names.clear()
        name = self._lookup(ident)
        self._names[ident] = (now, name)
        return name


_owner_name = _NameCache(owner_name)
_group_name = _NameCache(group_name)


def sorted_children(directory: str) -> list[os.DirEntry[str]]:
    """The entries of a directory in byte order of their names (Go's os.ReadDir order).

    Raises:
        OSError: the directory could not be read.
    """
    with os.scandir(directory) as it:
        return sorted(it, key=lambda entry: entry.name.encode("utf-8", "surrogateescape"))
