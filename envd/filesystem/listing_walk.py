"""ListDir's walk of the tree, as the reference's ListDir walks it: entries in pre-order and
byte order, read and lstat-ed through one descriptor per directory, symlinks never followed."""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import TYPE_CHECKING

from envd.filesystem import entries

if TYPE_CHECKING:
    from collections.abc import Iterator


def walk(root: str, depth: int) -> Iterator[tuple[str, list[tuple[bytes, os.stat_result, bytes]]]]:
    """Every entry under `root` down to `depth` levels, pre-order, siblings in byte order, as
    runs of siblings: (shown directory, [(name, lstat, real path)]). A run ends at the end of
    its directory or at a subdirectory the walk goes into next.

    The walk of the reference's ListDir: it reads the root's realpath but shows paths under
    the requested (cleaned) root, never follows symlinks inside the tree, and is iterative, so
    a very deep tree cannot exhaust the interpreter's recursion limit. Each directory is read
    and its entries lstat-ed through one descriptor, closed before the walk goes deeper.

    Raises:
        OSError: the root could not be resolved or read (ELOOP for a symlink cycle), or a
            directory in the tree could not be read or an entry not stat-ed (as in Go).
        RootNotADirectoryError: the root is not a directory.
    """
    real_root = os.path.realpath(root, strict=True)
    if not os.path.isdir(real_root):
        raise entries.RootNotADirectoryError(root)
    children = _children(real_root.encode("utf-8", "surrogateescape"))
    if children is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), root)
    # One (remaining children, shown directory path, level) per directory being walked.
    stack = [(iter(children), posixpath.normpath(root), 1)]
    while stack:
        remaining, shown_dir, level = stack[-1]
        if level == depth:  # nothing below: the rest of the directory is one run
            stack.pop()
            yield shown_dir, list(remaining)
            continue
        run = []
        for child in remaining:
            run.append(child)
            name, st, real = child
            if stat.S_ISDIR(st.st_mode) and (grandchildren := _children(real)) is not None:
                shown = posixpath.join(shown_dir, name.decode("utf-8", "surrogateescape"))
                stack.append((iter(grandchildren), shown, level + 1))
                break
        else:
            stack.pop()
        yield shown_dir, run


def _children(directory: bytes) -> list[tuple[bytes, os.stat_result, bytes]] | None:
    """(name, lstat, real path) of a directory's entries in byte order of their names (Go's
    os.ReadDir order); None if the directory vanished. Entries that vanish between the listing
    and their lstat are left out."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        prefix = directory if directory.endswith(b"/") else directory + b"/"
        found = []
        for name in sorted([name.encode("utf-8", "surrogateescape") for name in os.listdir(fd)]):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append((name, st, prefix + name))
        return found
    finally:
        os.close(fd)
