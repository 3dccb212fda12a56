"""A layer of the layer store written as an OCI image layer (an uncompressed PAX tar), for the
layer registry (sandboxd.images.layer_registry); sandboxd.images.unpack makes the same layer of
it again. The layer's files were written by a sandbox (hostile): directories are reached by fd
without following a symlink, files opened with O_NOFOLLOW, symbolic links stored as links.

As overlayfs keeps a layer, so the tar says it as the OCI spec does: a whiteout (a 0/0
character device) becomes an empty `.wh.NAME`, an opaque directory (`trusted.overlay.opaque=y`)
gets a `.wh..wh..opq` entry; hard links within the layer are tar hard links; owners, modes,
times, FIFOs and the extended attributes the unpack takes back (`user.*` but overlayfs' own
`user.overlay.*`, `security.capability`) are kept. Other device nodes and sockets are skipped."""

from __future__ import annotations

import logging
import os
import stat
import tarfile
from typing import TYPE_CHECKING, Protocol

from sandboxd.layers.entries import DIR_FLAGS, OPAQUE_XATTR, Parts, walk

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("sandboxd.layers.layer_tar")

WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"
KEPT_XATTRS = ("security.capability", "user.")
_OVERLAY_XATTRS = "user.overlay."
_CHUNK = 1 << 20


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


def write_layer_tar(layer: Path, out: Writer) -> None:
    """Write the layer directory `layer` to `out` as a tar. Blocking.

    Raises:
        OSError: the layer could not be read (or `out` written).
    """
    root = os.open(layer, DIR_FLAGS)
    try:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]  # a duck-typed stream is what w| writes
            _Writer(tar, root).tree()
    finally:
        os.close(root)


class _Writer:
    def __init__(self, tar: tarfile.TarFile, root: int) -> None:
        self.tar, self.root = tar, root
        self.links: dict[tuple[int, int], str] = {}  # (device, inode) -> its first path

    def tree(self) -> None:
        """The root, then every directory's entries, a directory at a time (no recursion: a
        sandbox may nest directories deeper than Python's stack)."""
        self._add_dir(self.root, (), os.fstat(self.root))
        todo: list[Parts] = [()]
        while todo:
            parts = todo.pop()
            fd = walk(self.root, parts)
            if fd is None:
                raise OSError(f"layer directory /{'/'.join(parts)} is no directory any more")
            try:
                for name in sorted(os.listdir(fd)):
                    todo += self._entry(fd, name, (*parts, name))
            finally:
                os.close(fd)

    def _entry(self, parent: int, name: str, here: Parts) -> list[Parts]:
        """Write `name`; a directory is returned (its entries come later)."""
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        path = "/".join(here)
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            try:
                self._add_dir(fd, here, st)
            finally:
                os.close(fd)
            return [here]
        if stat.S_ISREG(st.st_mode):
            self._file(parent, name, path, st)
        elif stat.S_ISLNK(st.st_mode):
            info = _info(path, st, tarfile.SYMTYPE)
            info.linkname = os.readlink(name, dir_fd=parent)
            self.tar.addfile(info)
        elif stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0):
            self.tar.addfile(_marker("/".join((*here[:-1], WHITEOUT + name))))
        elif stat.S_ISFIFO(st.st_mode):
            self.tar.addfile(_info(path, st, tarfile.FIFOTYPE))
        else:
            log.debug("layer entry /%s skipped: a socket or device node", path)
        return []

    def _add_dir(self, fd: int, here: Parts, st: os.stat_result) -> None:
        info = _info("/".join(here) or ".", st, tarfile.DIRTYPE)
        info.pax_headers = _xattrs(fd)
        self.tar.addfile(info)
        if _opaque(fd):
            self.tar.addfile(_marker("/".join((*here, OPAQUE))))

    def _file(self, parent: int, name: str, path: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in self.links:
            info = _info(path, st, tarfile.LNKTYPE)
            info.linkname = self.links[key]
            self.tar.addfile(info)
            return
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        with os.fdopen(fd, "rb", buffering=_CHUNK) as content:
            info = _info(path, st, tarfile.REGTYPE)
            info.size = st.st_size
            info.pax_headers = _xattrs(fd)
            self.tar.addfile(info, content)
        self.links[key] = path


def _info(path: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = st.st_mtime
    return info


def _marker(path: str) -> tarfile.TarInfo:
    """An empty root-owned file: an OCI whiteout or opaque marker."""
    info = tarfile.TarInfo(path)
    info.mode, info.mtime = 0o644, 0
    info.uname = info.gname = ""
    return info


def _opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE_XATTR) == b"y"
    except OSError:  # ENODATA: not opaque
        return False


def _xattrs(fd: int) -> dict[str, str]:
    """The kept extended attributes of `fd` as PAX headers (binary values as surrogates:
    tarfile writes them back as the bytes they were)."""
    headers = {}
    for attr in os.listxattr(fd):
        if attr.startswith(KEPT_XATTRS) and not attr.startswith(_OVERLAY_XATTRS):
            value = os.getxattr(fd, attr)
            headers[f"SCHILY.xattr.{attr}"] = value.decode("utf-8", "surrogateescape")
    return headers
