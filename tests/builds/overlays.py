"""Real overlay mounts for the layer tests: a read-only view of layers (what a build passes as
`lower_view`, and what a template built from the layers shows), and a sandbox-like writable
overlay. Each is unmounted when its block ends, failed or not."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from sandboxd.host import libc
from sandboxd.host.removal import detach_mounts, remove_tree

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


DEEP = 1050  # directories: deeper than Python's recursion limit (1000), and than PATH_MAX allows


@contextlib.contextmanager
def deep_trees(*roots: Path) -> Iterator[None]:
    """Remove `roots` at the end with rm -rf: pytest's own clean-up (shutil.rmtree) recurses
    and fails on DEEP trees, for every later test of the session."""
    try:
        yield
    finally:
        for root in roots:
            remove_tree(root)


def make_deep(root: Path, uid: int = 0) -> None:
    """`root/d/d/.../d/leaf` (DEEP directories), made by fd (the path is too long to name)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEEP):
        os.mkdir("d", dir_fd=fd)
        os.chown("d", uid, uid, dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leaf, b"deep")
    os.fchown(leaf, uid, uid)
    os.close(leaf)
    os.close(fd)


def read_deep(root: Path) -> bytes:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEEP):
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = child
    try:
        leaf = os.open("leaf", os.O_RDONLY, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        return os.read(leaf, 100)
    finally:
        os.close(leaf)
