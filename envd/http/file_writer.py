"""Writing one uploaded file as the reference envd's processFile does: parents created
and chowned, the target truncated in place, new files fchown-ed, `user.e2b.*` metadata
rewritten on the open descriptor.

Fault policy (a deliberate decision):
* A file this upload CREATED is unlinked again if the upload does not complete (client
  disconnect, cut or corrupt body, full disk): a failed upload leaves no partial new file.
* An EXISTING file is written in place like the reference (O_TRUNC keeps the inode, mode,
  owner and hard links, and works on /proc, /sys and FIFOs), so a failed upload leaves it
  truncated or partially written. Writing to a temp file and renaming would break those
  cases and change the inotify footprint SDK watch tests count on.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import stat
from typing import TYPE_CHECKING, Final

from envd.errors import EnvdHTTPError, ErrnoAnswer, http_status, is_disk_full
from envd.metadata import XATTR_PREFIX, read_metadata
from envd.users import ensure_dirs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from envd.users import User

log = logging.getLogger("envd.http.files")

METADATA_HEADER_PREFIX: Final = b"x-metadata-"
# Linux's xattr limits as the reference envd enforces them (XATTR_NAME_MAX 255 minus the
# prefix; one 4 KiB block for every name and value together).
METADATA_KEY_MAX_BYTES: Final = 255 - len(XATTR_PREFIX)
METADATA_TOTAL_MAX_BYTES: Final = 4096
_NO_XATTR_SUPPORT: Final = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP})
# The reference's processFile answers 500 for every failure to create or open the target; a
# name longer than the filesystem allows is still the caller's mistake (400) here.
_CALLER_ERRORS: Final = frozenset({ErrnoAnswer.ENAMETOOLONG})


def go_error(action: str, path: str, exc: OSError) -> str:
    """Format an OSError as Go's *PathError prints it: "open /x: no such file or directory"."""
    reason = exc.strerror or str(exc)
    return f"{action} {path}: {reason[:1].lower()}{reason[1:]}"


def _printable_ascii(text: str) -> bool:
    return all(" " <= c <= "~" for c in text)


def parse_metadata(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The X-Metadata-* request headers (raw ASGI ones) as {lowercased key: value}; first
    value wins.

    Raises:
        EnvdHTTPError: 400 "invalid metadata: …" for bad characters or sizes.
    """
    metadata: dict[str, str] = {}
    for raw_name, raw_value in headers:  # only these few are decoded
        if not raw_name.startswith(METADATA_HEADER_PREFIX):
            continue
        key = raw_name[len(METADATA_HEADER_PREFIX) :].decode("latin-1")
        if key and key not in metadata:
            metadata[key] = raw_value.decode("latin-1")
    total = 0
    for key, value in metadata.items():
        if not _printable_ascii(key):
            raise EnvdHTTPError(400, f"invalid metadata: key {key!r} has non-printable characters")
        if not _printable_ascii(value):
            raise EnvdHTTPError(
                400, f"invalid metadata: value of {key!r} has non-printable characters"
            )
        if len(key) > METADATA_KEY_MAX_BYTES:
            raise EnvdHTTPError(
                400, f"invalid metadata: key {key!r} is longer than {METADATA_KEY_MAX_BYTES} bytes"
            )
        total += len(XATTR_PREFIX) + len(key) + len(value)
    if total > METADATA_TOTAL_MAX_BYTES:
        raise EnvdHTTPError(
            400, f"invalid metadata: total size exceeds {METADATA_TOTAL_MAX_BYTES} bytes"
        )
    return metadata


class UploadTarget:
    """One file being written by an upload; create with `open_upload_target`."""

    def __init__(self, path: str, fd: int, *, created: bool, content_length: int | None) -> None:
        self.path = path
        self.fd = fd
        self.created = created
        self.content_length = content_length
        self.written = 0

    def write(self, data: bytes | memoryview) -> None:
        """Write all of `data` (straight from the event loop: page-cache writes are fast)."""
        view = memoryview(data)
        self.written += view.nbytes
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            if is_disk_full(exc):
                message = "not enough disk space available"
                if self.content_length is not None:
                    message = f"attempted to write {self.content_length} bytes: {message}"
                raise EnvdHTTPError(507, message) from exc
            raise EnvdHTTPError(
                500, f"error writing file: {go_error('write', self.path, exc)}"
            ) from exc

    def finish(self, metadata: dict[str, str]) -> dict[str, str]:
        """Rewrite the metadata, close the file and return its metadata as stored."""
        try:
            # A new file has no xattrs: skipping the calls keeps its inotify footprint at
            # CREATE, ATTRIB, MODIFY (SDK watch tests count exactly three events).
            if metadata or not self.created:
                self._replace_metadata(metadata)
                return read_metadata(self.fd)
            return {}
        finally:
            self.close()

    def _replace_metadata(self, metadata: dict[str, str]) -> None:
        wanted = {XATTR_PREFIX + key: value.encode() for key, value in metadata.items()}
        try:
            for name in os.listxattr(self.fd):
                if name.startswith(XATTR_PREFIX) and name not in wanted:
                    os.removexattr(self.fd, name)
            for name, value in wanted.items():
                os.setxattr(self.fd, name, value)
        except OSError as exc:
            if exc.errno in _NO_XATTR_SUPPORT:
                log.warning("metadata not stored: %s does not support xattrs", self.path)
                return
            status = 507 if is_disk_full(exc) else 500
            raise EnvdHTTPError(status, f"error setting metadata: {exc.strerror}") from exc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def abort(self) -> None:
        """Give up: close, and unlink the file if this upload created it (see module doc)."""
        self.close()
        if self.created:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not remove partial upload %s: %s", self.path, exc)


def ensure_parent_dirs(path: str, user: User) -> None:
    """Ensure-dirs (mkdir 0755 + chown) for the parent of `path`, failures as the reference
    reports them."""
    try:
        ensure_dirs(posixpath.dirname(path), user)
    except OSError as exc:
        reason = str(exc) if exc.filename is None else go_error("mkdir", exc.filename, exc)
        status = http_status(exc, only=_CALLER_ERRORS)
        raise EnvdHTTPError(status, f"error ensuring directories: {reason}") from exc


def open_upload_target(
    path: str, user: User, content_length: int | None, *, may_block: bool = True
) -> UploadTarget | None:
    """Ensure the parents, then open `path` for writing as processFile does (or create it at
    once when that is sure to end the same way).

    With `may_block` False (called on the event loop) only a regular file is opened, and
    None is returned for anything else, before it is touched: opening a FIFO waits for a
    reader, and a device may wait too. The caller then opens it again in a worker thread.

    Raises:
        EnvdHTTPError: 400 for a directory target, 507 when no inode (or inode quota) is
            left, 500 otherwise.
    """
    # The common case first: a new file in an existing directory, created in one syscall
    # where the checks below take three. Failing leaves nothing behind, and the checks then
    # find and answer the cause in the reference's order.
    try:
        fd = _create_new(path)
    except OSError:
        fd = -1
    if fd >= 0:
        return _owned_target(path, fd, user, created=True, content_length=content_length)
    ensure_parent_dirs(path, user)
    try:
        info: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        message = f"error getting file info: {go_error('stat', path, exc)}"
        raise EnvdHTTPError(http_status(exc, only=_CALLER_ERRORS), message) from exc
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise EnvdHTTPError(400, f"path is a directory: {path}")
    if not may_block and info is not None and not stat.S_ISREG(info.st_mode):
        return None
    created = False
    try:
        fd = _create_new(path) if info is None else -1
        created = fd >= 0
        if not created:
            if info is None and not may_block:
                return None  # appeared since the stat, or a dangling symlink: could be a FIFO
            # Existing file: truncate in place as the reference does, owner changed first.
            if info is not None:
                os.chown(path, user.uid, user.gid)
            fd = _open_existing(path, may_block=may_block)
            if fd < 0:
                return None
    except OSError as exc:
        if is_disk_full(exc):  # no inode left, or the user's quota of them used up
            raise EnvdHTTPError(
                507, f"not enough inodes available: {go_error('open', path, exc)}"
            ) from exc
        message = f"error opening file: {go_error('open', path, exc)}"
        raise EnvdHTTPError(http_status(exc, only=_CALLER_ERRORS), message) from exc
    if info is None:
        return _owned_target(path, fd, user, created=created, content_length=content_length)
    return UploadTarget(path, fd, created=created, content_length=content_length)


def _owned_target(
    path: str, fd: int, user: User, *, created: bool, content_length: int | None
) -> UploadTarget:
    """The target of a file that did not exist before the open, given to the user."""
    try:
        os.fchown(fd, user.uid, user.gid)
    except OSError as exc:
        UploadTarget(path, fd, created=created, content_length=None).abort()
        raise EnvdHTTPError(500, f"error changing ownership: {exc.strerror}") from exc
    return UploadTarget(path, fd, created=created, content_length=content_length)


def _open_existing(path: str, *, may_block: bool) -> int:
    """Open and truncate an existing file; -1 if `may_block` is False and it turned out not
    to be a regular file (replaced since the stat; O_NONBLOCK keeps even that open short)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    if may_block:
        return os.open(path, flags, 0o666)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            return -1
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    os.set_blocking(fd, True)
    return fd


def _create_new(path: str) -> int:
    """O_EXCL create, so "we created it" (and may unlink it on failure) is certain; -1 if
    the file appeared since the stat."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError:
        return -1
