"""What writing a layer from another tree needs, for COPY steps (copy_layer) and for a build
sandbox's writable layer (sandboxd.runtime.nspawn.export): file contents copied in the kernel,
directories reached by fd without following a symlink, and directory times set once nothing more
is written into them. The layer store makes the layer whole or not at all (sandboxd.layers.store)."""

from __future__ import annotations

import errno
import os

# A layer's format as overlayfs reads it, shared by whatever writes layers (image unpacks,
# COPY steps, a sandbox's exported writable layer).
OPAQUE_XATTR = "trusted.overlay.opaque"
# Directories are opened by fd, never through a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


Parts = tuple[str, ...]

_CHUNK = 1 << 30
# copy_file_range(2) refuses these across filesystems or on some (since 5.19, EXDEV); sendfile(2)
# copies between any two.
_NO_COPY_RANGE = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


def copy_data(src: int, dst: int) -> None:
    """The rest of the file `src` appended to `dst` (reflinked or copied in the kernel)."""
    try:
        while os.copy_file_range(src, dst, _CHUNK):
            pass
    except OSError as e:
        if e.errno not in _NO_COPY_RANGE:
            raise
        while os.sendfile(dst, src, None, _CHUNK):
            pass


def walk(root: int, parts: Parts) -> int | None:
    """An fd of the directory `parts` under `root`, or None if that is not a directory reached
    without following a symlink."""
    fd = os.dup(root)
    for part in parts:
        try:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                os.close(fd)
                raise
            child = None
        os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def lstat_in(root: int, parts: Parts) -> os.stat_result | None:
    """lstat of `parts` under `root` (its parents reached as `walk` does), None if absent."""
    parent = walk(root, parts[:-1])
    if parent is None:
        return None
    try:
        return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)


class DirTimes:
    """Times to give directories once nothing more is written into them (writing an entry sets
    its directory's mtime): the deepest first."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.times: dict[Parts, tuple[int, int]] = {}

    def later(self, parts: Parts, st: os.stat_result) -> None:
        self.times[parts] = (st.st_atime_ns, st.st_mtime_ns)

    def apply(self) -> None:
        for parts in sorted(self.times, key=len, reverse=True):
            fd = walk(self.root, parts)
            if fd is None:  # removed after all (snapshot's pruning)
                continue
            try:
                os.utime(fd, ns=self.times[parts])
            finally:
                os.close(fd)
