"""`rm -rf` for Remove: iterative (a tree deeper than Python's recursion limit is still
removed) and tolerant of entries that vanish while it runs, like Go's os.RemoveAll; and the
guard that keeps it off `/` and the user's home."""

from __future__ import annotations

import contextlib
import os
import stat


class ProtectedPathError(Exception):
    """Removing the path would delete the user's home directory or the whole filesystem."""


def check_removable(path: str, home: str) -> None:
    """Refuse the user's home directory and any directory that contains it, `/` included.

    No client means to delete these (GNU rm refuses `/` too), but an empty path or `~`
    resolves to the home, and a fuzzed Remove once wiped /root. Compared by real path, so
    `/root/.`, `//root` or a symlinked parent are caught; a symlink itself is removed, not its
    target, so it is never protected.

    Raises:
        ProtectedPathError: with the reason.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return  # nothing there (or unreachable): remove_tree decides
    if not stat.S_ISDIR(st.st_mode):
        return
    real = os.path.realpath(path)
    real_home = os.path.realpath(home)
    if real == real_home:
        raise ProtectedPathError(f"refusing to remove {path}: it is the user's home directory")
    # `/` included: every home is below it.
    if real_home.startswith(real.rstrip("/") + "/"):
        raise ProtectedPathError(
            f"refusing to remove {path}: it contains the user's home directory {home}"
        )


def _unlink_files(directory: str) -> list[str]:
    """Remove every non-directory in `directory`; return its subdirectories."""
    subdirs = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    return subdirs


def remove_tree(path: str) -> None:
    """Remove `path` and everything below it; a symlink is removed, not its target.

    A missing path is not an error (Go envd's Remove).

    Raises:
        OSError: something could not be removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    # Depth-first: a directory is removed once emptied; its subdirectories go on the stack
    # above it, so it is revisited (and found empty) after them.
    stack = [path]
    while stack:
        try:
            subdirs = _unlink_files(stack[-1])
        except FileNotFoundError:
            stack.pop()
            continue
        if subdirs:
            stack.extend(subdirs)
            continue
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(stack.pop())
