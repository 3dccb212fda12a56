"""Unpacking one image layer (a tar: plain, gzip or zstd) into an empty directory as an overlayfs
lower layer: `.wh.NAME` becomes a whiteout (a 0/0 character device NAME) and `.wh..wh..opq`
makes its directory opaque (`trusted.overlay.opaque=y`), as containerd's overlay snapshotter
does. Nothing may land outside the directory: every path is walked one component at a time
without following symlinks, entries with an absolute path or `..` are refused, and hard links
must name an entry of the same layer. Symbolic links are kept as they are (they resolve inside
the container). Ownership and modes are kept as in the tar: sandboxes see them through an
idmapped mount (sandboxd.host.steps.Layers), like base's."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import tarfile
from typing import TYPE_CHECKING, Protocol

from sandboxd.errors import HostError, ImageError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

log = logging.getLogger("sandboxd.images.unpack")

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
# Extended attributes taken from the tar (PAX SCHILY.xattr.*): file capabilities and user ones.
# Never trusted.*: an image must not set overlayfs' own attributes (redirects, metacopy).
_KEPT_XATTRS = ("security.capability", "user.")
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Parts = tuple[str, ...]


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Hashing:
    """A reader that hashes what passes through it (the uncompressed tar, for its diff_id)."""

    def __init__(self, stream: _Reader) -> None:
        self.stream = stream
        self.sha = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.sha.update(data)
        return data


def unpack(blob: Path, dest: Path, diff_id: str) -> None:
    """Unpack the layer `blob` into the empty directory `dest` (made 0755, owned 0:0 unless the
    tar says otherwise for `./`).

    Raises:
        ImageError: an entry would leave `dest`, the blob is not a tar (plain, gzip or zstd),
            or the uncompressed tar's sha256 is not `diff_id`.
        HostError: the layer is zstd-compressed and zstd is not installed.
    """
    os.chown(dest, 0, 0)
    dest.chmod(0o755)
    root = os.open(dest, _DIR_FLAGS)
    try:
        with _decompressed(blob) as stream:
            hashing = _Hashing(stream)
            _unpack_tar(hashing, root)
            while hashing.read(_CHUNK):  # the tar's padding after its end marker
                pass
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ImageError(f"layer {blob.name}: {e}") from e
    finally:
        os.close(root)
    found = f"sha256:{hashing.sha.hexdigest()}"
    if found != diff_id:
        raise ImageError(
            f"layer {blob.name}: its tar has digest {found}, the config says {diff_id}"
        )


@contextlib.contextmanager
def _decompressed(blob: Path) -> Iterator[_Reader]:
    """The tar in `blob`: gunzipped by Python, unzstd'ed by zstd(1) (the standard library has
    no zstd before 3.14), or as it is."""
    with open(blob, "rb") as f:
        magic = f.read(4)
    if magic[:2] == _GZIP:
        with gzip.open(blob, "rb") as gz:
            yield gz
    elif magic == _ZSTD:
        zstd = shutil.which("zstd")
        if zstd is None:
            raise HostError("zstd is missing (scripts/install installs it)")
        with subprocess.Popen([zstd, "-d", "-c", "-q", "--", str(blob)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:  # fmt: skip
            assert proc.stdout is not None  # noqa: S101  # asked for a pipe
            try:
                yield proc.stdout
            finally:
                proc.kill()  # exited already unless the unpack stopped half-way
            if proc.wait() not in (0, -signal.SIGKILL):
                raise ImageError(f"zstd could not decompress the layer (exit {proc.returncode})")
    else:
        with open(blob, "rb") as raw:
            yield raw


def _unpack_tar(stream: _Hashing, root: int) -> None:
    dirs: dict[Parts, tarfile.TarInfo] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]  # a duck-typed stream is what r| reads
        for member in tar:
            _entry(tar, member, root, dirs)
    for parts, member in reversed(dirs.items()):  # children first: their times stay
        fd = _open_dir(root, parts, create=False)
        try:
            _set_meta(fd, member)
        finally:
            os.close(fd)


def parts_of(name: str) -> Parts:
    """The components of an entry's path, relative to the layer's root.

    Raises:
        ImageError: the path is absolute or has a `..` component.
    """
    if name.startswith("/"):
        raise ImageError(f"layer entry '{name}' is an absolute path: refused")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ImageError(f"layer entry '{name}' has a '..' component: refused")
    return parts


def _entry(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, dirs: dict[Parts, tarfile.TarInfo]) -> None:  # fmt: skip
    parts = parts_of(m.name)
    if not parts:  # `./`: the layer's root itself
        dirs[()] = m
        return
    parent = _open_dir(root, parts[:-1], create=True)
    try:
        name = parts[-1]
        if name == OPAQUE:
            os.setxattr(parent, OPAQUE_XATTR, b"y")
        elif name.startswith(WHITEOUT):
            _whiteout(parent, name.removeprefix(WHITEOUT))
        elif m.ischr() or m.isblk():
            log.debug("layer device node %s skipped", m.name)
        else:
            _replace(parent, name, m.isdir(), parts, dirs)
            _make(tar, m, root, parent, name, parts, dirs)
    finally:
        os.close(parent)


def _make(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, parent: int, name: str, parts: Parts, dirs: dict[Parts, tarfile.TarInfo]) -> None:  # fmt: skip
    if m.isdir():
        if not _exists(parent, name):
            os.mkdir(name, 0o700, dir_fd=parent)
        dirs[parts] = m  # its metadata once everything in it is made
    elif m.isreg():
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=parent)  # fmt: skip
        try:
            content = tar.extractfile(m)
            assert content is not None  # noqa: S101  # a regular member always has one
            with os.fdopen(os.dup(fd), "wb") as out:
                shutil.copyfileobj(content, out, _CHUNK)
            _set_meta(fd, m)
        finally:
            os.close(fd)
    elif m.issym():
        os.symlink(m.linkname, name, dir_fd=parent)
        os.chown(name, m.uid, m.gid, dir_fd=parent, follow_symlinks=False)
        os.utime(name, (m.mtime, m.mtime), dir_fd=parent, follow_symlinks=False)
    elif m.islnk():
        target = parts_of(m.linkname)
        if not target:
            raise ImageError(f"layer entry '{m.name}' is a hard link to the layer's root")
        source = _open_dir(root, target[:-1], create=False)
        try:
            os.link(target[-1], name, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError as e:
            raise ImageError(
                f"layer entry '{m.name}' links to '{m.linkname}', not in the layer"
            ) from e
        finally:
            os.close(source)
    elif m.isfifo():
        os.mkfifo(name, 0o600, dir_fd=parent)
        fd = os.open(
            name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
        try:
            _set_meta(fd, m)
        finally:
            os.close(fd)


def _open_dir(root: int, parts: Parts, *, create: bool) -> int:
    """An fd of the directory `parts` under `root`, reached without following a symlink (and
    made, 0755 root's, where missing when `create`; the tar's entry for it may come later)."""
    fd = os.dup(root)
    for i, part in enumerate(parts):
        try:
            if create and not _exists(fd, part):
                os.mkdir(part, 0o755, dir_fd=fd)
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except (NotADirectoryError, OSError) as e:
            os.close(fd)
            if isinstance(e, FileNotFoundError) and not create:
                raise
            path = "/".join(parts[: i + 1])
            raise ImageError(f"layer path '{path}' is not a directory (a symlink?): refused") from e
        os.close(fd)
        fd = child
    return fd


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _replace(parent: int, name: str, is_dir: bool, parts: Parts, dirs: dict[Parts, tarfile.TarInfo]) -> None:  # fmt: skip
    """A later entry of the same path replaces an earlier one (a directory stays a directory)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if is_dir:
            return
        shutil.rmtree(name, dir_fd=parent)
        for gone in [p for p in dirs if p[: len(parts)] == parts]:
            del dirs[gone]
    else:
        os.unlink(name, dir_fd=parent)


def _whiteout(parent: int, name: str) -> None:
    """Hide `name` of the layers below. The OCI spec's rule: a whiteout never hides an entry of
    its own layer, so one already made here stays."""
    if not name or name in (".", ".."):
        raise ImageError(f"a whiteout '{WHITEOUT}{name}' names no entry: refused")
    if not _exists(parent, name):
        os.mknod(name, stat.S_IFCHR, os.makedev(0, 0), dir_fd=parent)


def _set_meta(fd: int, m: tarfile.TarInfo) -> None:
    """Owner, then mode (a chown clears set-id bits), extended attributes, then times."""
    os.fchown(fd, m.uid, m.gid)
    os.fchmod(fd, stat.S_IMODE(m.mode))
    for key, value in m.pax_headers.items():
        attr = key.removeprefix("SCHILY.xattr.")
        if attr != key and attr.startswith(_KEPT_XATTRS):
            os.setxattr(fd, attr, value.encode("utf-8", "surrogateescape"))
    os.utime(fd, (m.mtime, m.mtime))
