"""Writing a tar stream's entries into a directory so that nothing lands outside it: every path
is walked one component at a time without following symlinks, entries with an absolute path or
`..` are refused, and hard links must name an entry of the same archive. Symbolic links are
kept as they are (never followed here; they resolve inside the container). Device nodes are
skipped. Shared by image layers (sandboxd.images.unpack) and build-context uploads
(sandboxd.builds.uploads); `Rules` says how they differ."""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import shutil
import signal
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sandboxd.errors import HostError
from sandboxd.layers.entries import DIR_FLAGS, OPAQUE_XATTR

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

log = logging.getLogger("sandboxd.images.tar_tree")

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
# Extended attributes taken from the tar (PAX SCHILY.xattr.*): file capabilities and user ones.
# Never trusted.*: an archive must not set overlayfs' own attributes (redirects, metacopy).
KEPT_XATTRS = ("security.capability", "user.")
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20

Parts = tuple[str, ...]


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Rules:
    """What kind of archive this is: `what` names its entries in messages ("layer", "upload"),
    `refused` is the error raised for an entry that would leave the directory, `owners` whether
    owners are taken from the tar (else every entry is root's), `whiteouts` whether `.wh.`
    entries are overlayfs whiteouts (image layers) or plain names (anything else)."""

    what: str
    refused: type[Exception]
    owners: bool
    whiteouts: bool


@contextlib.contextmanager
def decompressed(path: Path, failed: type[Exception]) -> Iterator[Reader]:
    """The tar in the file `path`: gunzipped by Python, unzstd'ed by zstd(1) (the standard
    library has no zstd before 3.14), or as it is; told apart by their magic numbers.

    Raises:
        HostError: zstd is needed and missing.
        failed: zstd could not decompress it.
    """
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == _GZIP:
        with gzip.open(path, "rb") as gz:
            yield gz
    elif magic == _ZSTD:
        zstd = shutil.which("zstd")
        if zstd is None:
            raise HostError("zstd is missing (scripts/install installs it)")
        with subprocess.Popen([zstd, "-d", "-c", "-q", "--", str(path)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:  # fmt: skip
            assert proc.stdout is not None  # noqa: S101  # asked for a pipe
            try:
                yield proc.stdout
            finally:
                proc.kill()  # exited already unless the unpack stopped half-way
            if proc.wait() not in (0, -signal.SIGKILL):
                raise failed(f"zstd could not decompress the archive (exit {proc.returncode})")
    else:
        with open(path, "rb") as raw:
            yield raw


def extract(stream: Reader, root: int, rules: Rules) -> None:
    """Write the tar read from `stream` under the directory fd `root`; a directory's metadata
    is set once everything in it is made (children first: their times stay).

    Raises:
        rules.refused: an entry would leave `root`.
        tarfile.TarError, EOFError, OSError: a malformed archive or a failed write.
    """
    dirs: dict[Parts, tarfile.TarInfo] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]  # a duck-typed stream is what r| reads
        for member in tar:
            _entry(tar, member, root, dirs, rules)
    for parts, member in reversed(dirs.items()):
        fd = open_dir(root, parts, create=False, rules=rules)
        try:
            _set_meta(fd, member, rules)
        finally:
            os.close(fd)


def parts_of(name: str, rules: Rules) -> Parts:
    """The components of an entry's path, relative to the directory's root.

    Raises:
        rules.refused: the path is absolute or has a `..` component.
    """
    if name.startswith("/"):
        raise rules.refused(f"{rules.what} entry '{name}' is an absolute path: refused")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise rules.refused(f"{rules.what} entry '{name}' has a '..' component: refused")
    return parts


def _entry(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, dirs: dict[Parts, tarfile.TarInfo], rules: Rules) -> None:  # fmt: skip
    parts = parts_of(m.name, rules)
    if not parts:  # `./`: the root itself
        dirs[()] = m
        return
    parent = open_dir(root, parts[:-1], create=True, rules=rules)
    try:
        name = parts[-1]
        if rules.whiteouts and name == OPAQUE:
            os.setxattr(parent, OPAQUE_XATTR, b"y")
        elif rules.whiteouts and name.startswith(WHITEOUT):
            _whiteout(parent, name.removeprefix(WHITEOUT), rules)
        elif m.ischr() or m.isblk():
            log.debug("%s device node %s skipped", rules.what, m.name)
        else:
            _replace(parent, name, m.isdir(), parts, dirs)
            _make(tar, m, root, parent, name, parts, dirs, rules)
    finally:
        os.close(parent)


def _make(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, parent: int, name: str, parts: Parts, dirs: dict[Parts, tarfile.TarInfo], rules: Rules) -> None:  # fmt: skip
    if m.isdir():
        if not exists(parent, name):
            os.mkdir(name, 0o700, dir_fd=parent)
        dirs[parts] = m  # its metadata once everything in it is made
    elif m.isreg():
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=parent)  # fmt: skip
        try:
            content = tar.extractfile(m)
            assert content is not None  # noqa: S101  # a regular member always has one
            with os.fdopen(os.dup(fd), "wb") as out:
                shutil.copyfileobj(content, out, CHUNK)
            _set_meta(fd, m, rules)
        finally:
            os.close(fd)
    elif m.issym():
        os.symlink(m.linkname, name, dir_fd=parent)
        uid, gid = (m.uid, m.gid) if rules.owners else (0, 0)
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
        os.utime(name, (m.mtime, m.mtime), dir_fd=parent, follow_symlinks=False)
    elif m.islnk():
        _hardlink(m, root, parent, name, rules)
    elif m.isfifo():
        os.mkfifo(name, 0o600, dir_fd=parent)
        fd = os.open(
            name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
        try:
            _set_meta(fd, m, rules)
        finally:
            os.close(fd)


def _hardlink(m: tarfile.TarInfo, root: int, parent: int, name: str, rules: Rules) -> None:
    target = parts_of(m.linkname, rules)
    if not target:
        raise rules.refused(f"{rules.what} entry '{m.name}' is a hard link to the root")
    source = open_dir(root, target[:-1], create=False, rules=rules)
    try:
        os.link(target[-1], name, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError as e:
        raise rules.refused(
            f"{rules.what} entry '{m.name}' links to '{m.linkname}', not in the archive"
        ) from e
    finally:
        os.close(source)


def open_dir(root: int, parts: Parts, *, create: bool, rules: Rules) -> int:
    """An fd of the directory `parts` under `root`, reached without following a symlink (and
    made, 0755 root's, where missing when `create`; the tar's entry for it may come later).

    Raises:
        rules.refused: a component is not a directory (a symlink, a file).
        FileNotFoundError: a component is missing and not `create`.
    """
    fd = os.dup(root)
    for i, part in enumerate(parts):
        try:
            if create and not exists(fd, part):
                os.mkdir(part, dir_fd=fd)
                os.chmod(part, 0o755, dir_fd=fd)  # noqa: S103  # a layer's directory, read by all
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        except (NotADirectoryError, OSError) as e:
            os.close(fd)
            if isinstance(e, FileNotFoundError) and not create:
                raise
            path = "/".join(parts[: i + 1])
            raise rules.refused(
                f"{rules.what} path '{path}' is not a directory (a symlink?): refused"
            ) from e
        os.close(fd)
        fd = child
    return fd


def exists(dir_fd: int, name: str) -> bool:
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


def _whiteout(parent: int, name: str, rules: Rules) -> None:
    """Hide `name` of the layers below. The OCI spec's rule: a whiteout never hides an entry of
    its own layer, so one already made here stays."""
    if not name or name in (".", ".."):
        raise rules.refused(f"a whiteout '{WHITEOUT}{name}' names no entry: refused")
    if not exists(parent, name):
        os.mknod(name, stat.S_IFCHR, os.makedev(0, 0), dir_fd=parent)


def _set_meta(fd: int, m: tarfile.TarInfo, rules: Rules) -> None:
    """Owner, then mode (a chown clears set-id bits), extended attributes, then times."""
    os.fchown(fd, *((m.uid, m.gid) if rules.owners else (0, 0)))
    os.fchmod(fd, stat.S_IMODE(m.mode))
    for key, value in m.pax_headers.items():
        attr = key.removeprefix("SCHILY.xattr.")
        if attr != key and attr.startswith(KEPT_XATTRS):
            os.setxattr(fd, attr, value.encode("utf-8", "surrogateescape"))
    os.utime(fd, (m.mtime, m.mtime))
