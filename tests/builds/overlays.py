"""Real overlay mounts for the layer tests: a read-only view of layers (what a build passes as
`lower_view`, and what a template built from the layers shows), and a sandbox-like writable
overlay. Each is unmounted when its block ends, failed or not."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from sandboxd.host import libc
from sandboxd.host.removal import detach_mounts

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path


@contextlib.contextmanager
def view(layers: Sequence[Path], at: Path) -> Iterator[Path]:
    """`layers` (lowest first) as a read-only overlay at `at` (overlayfs wants two at least:
    an empty one is added below)."""
    empty = at.parent / f"{at.name}-empty"
    empty.mkdir(exist_ok=True)
    at.mkdir(exist_ok=True)
    lowerdir = ":".join(str(p) for p in reversed([empty, *layers]))
    libc.mount("overlay", str(at), "overlay", f"ro,lowerdir={lowerdir}")
    try:
        yield at
    finally:
        detach_mounts(at)


@contextlib.contextmanager
def writable(layers: Sequence[Path], upper: Path, at: Path) -> Iterator[Path]:
    work = at.parent / f"{at.name}-work"
    for d in (upper, work, at):
        d.mkdir(exist_ok=True)
    lowerdir = ":".join(str(p) for p in reversed(layers))
    libc.mount("overlay", str(at), "overlay",
               f"lowerdir={lowerdir},upperdir={upper},workdir={work}")  # fmt: skip
    try:
        yield at
    finally:
        detach_mounts(at)


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything under `root` as path -> (type, uid, gid, mode, content or link target)."""
    found: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    what: object = f.read()
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(path)
            else:
                what = None
            found[os.path.relpath(path, root)] = (
                stat.S_IFMT(st.st_mode),
                st.st_uid,
                st.st_gid,
                stat.S_IMODE(st.st_mode),
                what,
            )
    return found
