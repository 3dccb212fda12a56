"""GET /files: download a file, with gzip, byte ranges and conditional requests.

The identity body is streamed with `os.pread` in chunks of almost 1 MiB straight from the event
loop: reads of cached pages take about 0.1 ms, while Starlette's FileResponse (64 KiB chunks, a
thread hop per chunk) caps near 150 MiB/s. A gzip body is read and compressed in a worker
thread (milliseconds per chunk, GIL released), one chunk ahead of the event loop sending the
last one; a small one at once on the event loop. Only files that compress are gzipped unless
the client rejects identity (envd.http.compression says why and how).
"""

from __future__ import annotations

import os
import secrets
import stat
from functools import partial
from typing import TYPE_CHECKING, Final

import anyio
import anyio.to_thread
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from envd.errors import EnvdHTTPError, http_os_errors
from envd.http.compression import ALWAYS_GZIP_BELOW, gzip_compressor, worth_compressing
from envd.http.endpoint import Endpoint
from envd.http.file_request import authorize_file_request, resolve_path
from envd.http.media import (
    SNIFF_BYTES,
    NotAcceptableError,
    content_disposition,
    negotiate_encoding,
    sniff_content_type,
    type_by_extension,
)
from envd.http.ranges import (
    ByteRange,
    RangeError,
    http_date,
    parse_ranges,
    precondition_status,
    range_applies,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from anyio.streams.memory import MemoryObjectSendStream
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

    from envd.state import SandboxState
    from envd.users import UserCache

# Below the mmap threshold envd sets (envd.memory: 4 x 256 KiB), so each chunk reuses heap
# memory: 1 MiB chunks (plus the bytes object's header) were a fresh mmap each, faulted in page
# by page, which doubled the daemon's CPU per MiB (identity, curl: 1.5 against 0.7 ms).
READ_CHUNK_BYTES: Final = 960 * 1024
# Gzip bodies up to this size are compressed on the event loop (igzip: about 0.1 ms).
INLINE_GZIP_MAX_BYTES: Final = 64 * 1024
PSEUDO_FILE_SIZE_LIMIT: Final = 64 * 1024
PSEUDO_FILE_MAX_BYTES: Final = 16 * 1024 * 1024
_CONDITIONAL_HEADERS: Final = ("range", "if-modified-since", "if-none-match", "if-range")

# A body segment: bytes to send first (multipart headers), then `length` file bytes at `start`.
Segment = tuple[bytes, int, int]


class FileBodyResponse(Response):
    """Streams segments of an open file descriptor, then closes it; stops early if the client
    goes away (uvicorn silently drops sends to a closed connection)."""

    def __init__(
        self,
        fd: int,
        status: int,
        headers: dict[str, str],
        segments: Iterable[Segment],
        trailer: bytes = b"",
        *,
        gzip: bool = False,
    ) -> None:
        self.fd = fd
        self.status_code = status
        self.segments = list(segments)
        self.trailer = trailer
        self.gzip = gzip
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                disconnected = anyio.Event()
                tg.start_soon(_watch_disconnect, receive, disconnected)
                await send(
                    {
                        "type": "http.response.start",
                        "status": self.status_code,
                        "headers": self.raw_headers,
                    }
                )
                if scope["method"] == "HEAD":  # headers only; the server drops any body anyway
                    await send({"type": "http.response.body", "body": b""})
                elif self.gzip:
                    await self._send_gzip(send, disconnected)
                else:
                    await self._send_plain(send, disconnected)
                tg.cancel_scope.cancel()
        finally:
            os.close(self.fd)

    async def _send_plain(self, send: Send, disconnected: anyio.Event) -> None:
        for chunk in self._body_chunks(disconnected):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_gzip(self, send: Send, disconnected: anyio.Event) -> None:
        """Send what `_compress` produces; the channel holds one block, so the next chunk is
        compressed while this one is sent. A small body is compressed at once instead, on the
        event loop: two worker-thread round trips cost more CPU than compressing it."""
        [(_, offset, length)] = self.segments  # the whole file: gzip has no ranges
        if length <= INLINE_GZIP_MAX_BYTES:
            compressor = gzip_compressor()
            body = compressor.compress(os.pread(self.fd, length, offset)) + compressor.flush()
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        blocks, received = anyio.create_memory_object_stream[bytes](1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._compress, blocks, disconnected)
            async with received:
                async for block in received:
                    await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _compress(
        self, blocks: MemoryObjectSendStream[bytes], disconnected: anyio.Event
    ) -> None:
        """The gzip member of the whole file, read and compressed a chunk at a time in worker
        threads; stops at the chunk in progress when the client goes away."""
        [(_, offset, length)] = self.segments  # the whole file: gzip has no ranges
        end = offset + length
        compressor = gzip_compressor()

        def read_and_compress(at: int) -> tuple[int, bytes]:
            chunk = os.pread(self.fd, min(READ_CHUNK_BYTES, end - at), at)
            return len(chunk), compressor.compress(chunk)

        async with blocks:
            while offset < end:
                read, block = await anyio.to_thread.run_sync(read_and_compress, offset)
                if disconnected.is_set():
                    return
                if not read:  # the file shrank under us: end the body short
                    break
                offset += read
                if block:
                    await blocks.send(block)
            await blocks.send(await anyio.to_thread.run_sync(compressor.flush))

    def _body_chunks(self, disconnected: anyio.Event) -> Iterator[bytes]:
        """The identity body: each segment's prefix and bytes, then the trailer."""
        for prefix, start, length in self.segments:
            if prefix:
                yield prefix
            offset, end = start, start + length
            while offset < end and not disconnected.is_set():
                chunk = os.pread(self.fd, min(READ_CHUNK_BYTES, end - offset), offset)
                if not chunk:  # the file shrank under us: end the body short
                    break
                offset += len(chunk)
                yield chunk
        if self.trailer:
            yield self.trailer


async def _watch_disconnect(receive: Receive, disconnected: anyio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    disconnected.set()


def _text_error(status: int, message: str, headers: dict[str, str]) -> Response:
    """Go's http.Error, which ServeContent uses for 416."""
    headers = {**headers, "X-Content-Type-Options": "nosniff"}
    return PlainTextResponse(f"{message}\n", status_code=status, headers=headers)


def _stat_target(path: str) -> None:
    with http_os_errors("checking if path exists", path):
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise EnvdHTTPError(404, f"path '{path}' does not exist") from None
    if stat.S_ISDIR(info.st_mode):
        raise EnvdHTTPError(400, f"path '{path}' is a directory")
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO blocks until a writer appears, /dev/zero never ends, and none has a
        # size to announce: refuse them (the reference hangs, or serves nothing or a 500).
        raise EnvdHTTPError(400, f"path '{path}' is not a regular file")


def _snapshot_pseudo_file(fd: int) -> int:
    """Copy a pseudo file into an anonymous memory file and return that.

    /proc and /sys files report a size of 0 or one page whatever they hold, so serving them
    by their size would send nothing or a short body. Blocking: run in a worker thread.
    """
    copy = os.memfd_create("envd-download", os.MFD_CLOEXEC)
    try:
        total = 0
        while total < PSEUDO_FILE_MAX_BYTES and (
            chunk := os.read(fd, min(READ_CHUNK_BYTES, PSEUDO_FILE_MAX_BYTES - total))
        ):
            os.write(copy, chunk)
            total += len(chunk)
    except BaseException:
        os.close(copy)
        raise
    return copy


def _is_pseudo_file(info: os.stat_result) -> bool:
    # No blocks allocated yet a small size (0 for /proc, 4096 for /sys).
    return info.st_blocks == 0 and info.st_size <= PSEUDO_FILE_SIZE_LIMIT


def _choose_encoding(request: Request) -> tuple[str, bool]:
    """The negotiated encoding ("gzip" or "identity") and whether identity is rejected."""
    try:
        encoding, identity_rejected = negotiate_encoding(request.headers.get("accept-encoding", ""))
    except NotAcceptableError:
        raise EnvdHTTPError(
            406,
            "error parsing Accept-Encoding: no acceptable encoding found, supported: [gzip]",
        ) from None
    if any(name in request.headers for name in _CONDITIONAL_HEADERS):
        if identity_rejected:
            raise EnvdHTTPError(
                406, "identity encoding not acceptable for Range or conditional request"
            )
        return "identity", False
    return encoding, identity_rejected


async def _gzip_pays(fd: int, path: str, identity_rejected: bool) -> bool:
    """Whether to gzip a body the client accepts gzip for: always when identity is rejected
    (RFC 9110 12.5.3), else when the file compresses. Clients that accept gzip accept identity
    unless they say `identity;q=0` or `*;q=0`, so random data goes out as it is."""
    if identity_rejected:
        return True
    with http_os_errors("reading file", path):
        size = os.fstat(fd).st_size
        if size < ALWAYS_GZIP_BELOW:  # answered without reading: no thread
            return worth_compressing(fd, size)
        return await anyio.to_thread.run_sync(worth_compressing, fd, size)


async def download(request: Request, state: SandboxState, users: UserCache) -> Response:
    header_token = request.headers.get("x-access-token")
    file_request = authorize_file_request(request, state, users, "read", header_token)
    path = resolve_path(file_request.raw_path, file_request.user, state)
    _stat_target(path)
    encoding, identity_rejected = _choose_encoding(request)
    with http_os_errors("opening file", path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        mtime_s = int(os.fstat(fd).st_mtime)
        fd = await _servable(fd, path)
        headers = {
            "Vary": "Accept-Encoding",
            "Content-Disposition": content_disposition(path),
        }
        if encoding == "gzip" and await _gzip_pays(fd, path, identity_rejected):
            headers["Content-Encoding"] = "gzip"
            headers["Content-Type"] = (
                type_by_extension(file_request.raw_path) or "application/octet-stream"
            )
            size = os.fstat(fd).st_size
            return FileBodyResponse(fd, 200, headers, [(b"", 0, size)], gzip=True)
        response = _serve_identity(request, fd, mtime_s, file_request.raw_path, headers)
    except BaseException:
        os.close(fd)
        raise
    if not isinstance(response, FileBodyResponse):
        os.close(fd)
    return response


async def _servable(fd: int, path: str) -> int:
    """The descriptor whose first st_size bytes are served, whatever the encoding: `fd`, or
    for a pseudo file a snapshot of at most PSEUDO_FILE_MAX_BYTES (and `fd` is closed)."""
    if not _is_pseudo_file(os.fstat(fd)):
        return fd
    # Read errors surface here, before any header is sent (EIO from /proc/<pid>/mem).
    with http_os_errors("reading file", path):
        copy = await anyio.to_thread.run_sync(_snapshot_pseudo_file, fd)
    os.close(fd)
    return copy


def _serve_identity(
    request: Request, fd: int, mtime_s: int, raw_path: str, headers: dict[str, str]
) -> Response:
    """Go's http.ServeContent: preconditions, then the whole file or the requested ranges."""
    size = os.fstat(fd).st_size
    if mtime_s > 0:
        headers["Last-Modified"] = http_date(mtime_s)
    status = precondition_status(request.headers, mtime_s)
    if status is not None:
        return Response(status_code=status, headers=headers)
    content_type = type_by_extension(raw_path) or sniff_content_type(os.pread(fd, SNIFF_BYTES, 0))
    headers["Accept-Ranges"] = "bytes"
    ranges: list[ByteRange] = []
    range_header = request.headers.get("range", "")
    if range_header and range_applies(request.headers, mtime_s):
        try:
            ranges = parse_ranges(range_header, size)
        except RangeError as exc:
            if exc.no_overlap:
                headers["Content-Range"] = f"bytes */{size}"
            return _text_error(416, str(exc), headers)
        if sum(r.length for r in ranges) > size:
            ranges = []  # Go ignores range sets larger than the file (likely an attack)
    if not ranges:
        headers.update({"Content-Type": content_type, "Content-Length": str(size)})
        return FileBodyResponse(fd, 200, headers, [(b"", 0, size)])
    if len(ranges) == 1:
        only = ranges[0]
        headers["Content-Type"] = content_type
        headers["Content-Range"] = only.content_range(size)
        headers["Content-Length"] = str(only.length)
        return FileBodyResponse(fd, 206, headers, [(b"", only.start, only.length)])
    return _multipart_ranges(fd, ranges, size, content_type, headers)


def _multipart_ranges(
    fd: int, ranges: list[ByteRange], size: int, content_type: str, headers: dict[str, str]
) -> Response:
    boundary = secrets.token_hex(30)
    segments: list[Segment] = []
    for index, part in enumerate(ranges):
        lead = b"" if index == 0 else b"\r\n"
        prefix = (
            f"--{boundary}\r\nContent-Range: {part.content_range(size)}\r\n"
            f"Content-Type: {content_type}\r\n\r\n"
        ).encode("latin-1")
        segments.append((lead + prefix, part.start, part.length))
    trailer = f"\r\n--{boundary}--\r\n".encode()
    length = sum(len(p) + n for p, _, n in segments) + len(trailer)
    headers["Content-Type"] = f"multipart/byteranges; boundary={boundary}"
    headers["Content-Length"] = str(length)
    return FileBodyResponse(fd, 206, headers, segments, trailer)


def routes(state: SandboxState, users: UserCache) -> list[BaseRoute]:
    return [Route("/files", Endpoint(partial(download, state=state, users=users)), methods=["GET"])]
