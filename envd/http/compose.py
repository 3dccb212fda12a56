"""POST /files/compose: concatenate source files into a destination, then delete the sources.
The result is built in a temp file next to the destination and renamed over it, so a
failure leaves the destination and the sources as they were.

Each source is appended with the cheapest kernel path: FICLONERANGE (a reflink, no data
copied) when the destination offset is block aligned on a filesystem that shares extents
(XFS, btrfs); otherwise copy_file_range, except on reflink filesystems, where copy_file_range
of an unaligned part falls back to a copy slower than read/write (measured by
bench.compose), so plain 1 MiB reads and writes are used there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import anyio.to_thread
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from envd.errors import EnvdHTTPError, is_disk_full
from envd.http.body import BodyTooLargeError, read_capped
from envd.http.file_request import entry_json, resolve_path, resolve_user
from envd.http.file_writer import ensure_parent_dirs, go_error

if TYPE_CHECKING:
    from starlette.requests import Request

    from envd.state import SandboxState
    from envd.users import User, UserCache

# _IOW(0x94, 13, struct file_clone_range) from linux/fs.h.
FICLONERANGE: Final = 0x4020940D
REFLINK_BLOCK_BYTES: Final = 4096
COPY_CHUNK_BYTES: Final = 1024 * 1024
# Errors meaning "this filesystem (or this pair of files) cannot reflink": fall back.
_NO_CLONE: Final = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EBADF}
)


@dataclass(frozen=True, slots=True)
class ComposeRequest:
    sources: list[str]  # as sent, for messages
    resolved_sources: list[str]
    destination: str
    user: User


def _parse(body: bytes, state: SandboxState, users: UserCache) -> ComposeRequest:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvdHTTPError(400, f"invalid request body: {exc}") from None
    except RecursionError:  # the decoder recurses once per nesting level
        raise EnvdHTTPError(400, "invalid request body: nested too deeply") from None
    if not isinstance(data, dict):
        raise EnvdHTTPError(400, "invalid request body: expected a JSON object")
    sources = data.get("source_paths") or []
    destination = data.get("destination") or ""
    username = data.get("username")
    if (
        not isinstance(sources, list)
        or not all(isinstance(s, str) for s in sources)
        or not isinstance(destination, str)
        or not isinstance(username, str | None)
    ):
        raise EnvdHTTPError(400, "invalid request body: wrong field types")
    if not sources:
        raise EnvdHTTPError(400, "source_paths must not be empty")
    if not destination:
        raise EnvdHTTPError(400, "destination is required")
    user = resolve_user(username, state, users)
    resolved_destination = resolve_path(destination, user, state)
    resolved = [resolve_path(source, user, state) for source in sources]
    for path in resolved:
        if path == resolved_destination:
            raise EnvdHTTPError(400, f'source path "{path}" cannot be the same as destination')
    return ComposeRequest(sources, resolved, resolved_destination, user)


def _check_sources(request: ComposeRequest) -> None:
    for raw, path in zip(request.sources, request.resolved_sources, strict=True):
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            raise EnvdHTTPError(404, f"source file not found: {raw}") from None
        if not stat.S_ISREG(info.st_mode):
            raise EnvdHTTPError(400, f"source path is not a regular file: {raw}")


class _Appender:
    """Appends whole files to one destination descriptor, choosing the copy method per part."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0
        self.can_clone = True  # until the filesystem says otherwise
        self.cloned = False  # a clone worked: this filesystem shares extents

    def append(self, source_fd: int) -> None:
        size = os.fstat(source_fd).st_size
        if size == 0:
            return
        if self.offset % REFLINK_BLOCK_BYTES == 0 and self.can_clone and self._clone(source_fd):
            self.offset += size
        elif self.cloned:
            self._read_write(source_fd, size)
        else:
            self._copy_file_range(source_fd, size)

    def _clone(self, source_fd: int) -> bool:
        # struct file_clone_range {s64 src_fd; u64 src_offset, src_length, dest_offset};
        # length 0 means "to the end of the source".
        argument = struct.pack("=qQQQ", source_fd, 0, 0, self.offset)
        try:
            fcntl.ioctl(self.fd, FICLONERANGE, argument)
        except OSError as exc:
            if exc.errno not in _NO_CLONE:
                raise
            self.can_clone = exc.errno == errno.EINVAL  # EINVAL: only this range is unfit
            return False
        self.cloned = True
        return True

    def _copy_file_range(self, source_fd: int, size: int) -> None:
        copied = 0
        while copied < size:
            n = os.copy_file_range(source_fd, self.fd, size - copied, copied, self.offset)
            if n == 0:
                break
            copied += n
            self.offset += n

    def _read_write(self, source_fd: int, size: int) -> None:
        copied = 0
        while copied < size:
            chunk = os.pread(source_fd, min(COPY_CHUNK_BYTES, size - copied), copied)
            if not chunk:
                break
            copied += len(chunk)
            view = memoryview(chunk)
            while view:
                written = os.pwrite(self.fd, view, self.offset)
                view = view[written:]
                self.offset += written


def _create_temp(destination: str, user: User) -> tuple[str, int]:
    temp = f"{destination}.e2b-compose.{uuid.uuid4()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if is_disk_full(exc):
            raise EnvdHTTPError(507, "not enough disk space available") from exc
        raise EnvdHTTPError(
            500, f"error creating temp file: {go_error('open', temp, exc)}"
        ) from exc
    try:
        os.fchown(fd, user.uid, user.gid)
    except OSError as exc:
        os.close(fd)
        os.unlink(temp)
        raise EnvdHTTPError(500, f"error changing ownership: {exc.strerror}") from exc
    return temp, fd


def _append_sources(request: ComposeRequest, fd: int) -> None:
    appender = _Appender(fd)
    for raw, path in zip(request.sources, request.resolved_sources, strict=True):
        try:
            source_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                appender.append(source_fd)
            finally:
                os.close(source_fd)
        except OSError as exc:
            if is_disk_full(exc):
                raise EnvdHTTPError(507, "not enough disk space available") from exc
            raise EnvdHTTPError(500, f"error copying source file {raw}: {exc.strerror}") from exc


def compose_files(request: ComposeRequest) -> None:
    """The blocking part of a compose, run in one worker thread."""
    _check_sources(request)
    if os.path.isdir(request.destination):
        raise EnvdHTTPError(400, f"path is a directory: {request.destination}")
    ensure_parent_dirs(request.destination, request.user)
    temp, fd = _create_temp(request.destination, request.user)
    try:
        try:
            _append_sources(request, fd)
        finally:
            os.close(fd)
        try:
            os.rename(temp, request.destination)
        except OSError as exc:
            raise EnvdHTTPError(500, f"error renaming temp file: {exc.strerror}") from exc
    except BaseException:
        os.unlink(temp)
        raise
    for path in request.resolved_sources:
        # Errors ignored as by the reference (a duplicate source is already gone).
        with contextlib.suppress(OSError):
            os.unlink(path)


async def compose(request: Request, state: SandboxState, users: UserCache) -> Response:
    try:
        raw = await read_capped(request)
    except BodyTooLargeError as exc:
        raise EnvdHTTPError(413, str(exc)) from None
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is left to read it
    compose_request = _parse(raw, state, users)
    await anyio.to_thread.run_sync(compose_files, compose_request)
    body = (
        json.dumps(
            entry_json(compose_request.destination), ensure_ascii=False, separators=(",", ":")
        )
        + "\n"
    )
    return Response(body, media_type="application/json")


def routes(state: SandboxState, users: UserCache) -> list[BaseRoute]:
    async def post_compose(request: Request) -> Response:
        return await compose(request, state, users)

    return [Route("/files/compose", post_compose, methods=["POST"])]
