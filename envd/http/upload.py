"""POST /files: upload one raw body or the `file` parts of a multipart body
(the reference's PostFiles).

Bodies are streamed: each received chunk (about 250 KiB from uvicorn) is written with one
`os.write` from the event loop, and multipart bodies are parsed incrementally, so memory stays
flat whatever the size (a small multipart body is gathered whole and split in one pass
instead: whole_body_events). What a failed upload leaves behind is described in file_writer.
"""

from __future__ import annotations

import json
import logging
import zlib
from functools import partial
from typing import TYPE_CHECKING, Final

import anyio.to_thread
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MAX_BOUNDARY_LENGTH, MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from envd.errors import EnvdHTTPError
from envd.header_bytes import first_values, text
from envd.http.endpoint import BytesResponse, Endpoint
from envd.http.file_request import (
    FileRequest,
    authorize_file_request,
    entry_json,
    resolve_path,
)
from envd.http.file_writer import UploadTarget, open_upload_target, parse_metadata
from envd.http.multipart_parts import (
    Event,
    PartEvents,
    new_parser,
    part_filename,
    whole_body_events,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

    from envd.state import SandboxState
    from envd.users import User, UserCache

log = logging.getLogger("envd.http.files")

# Bound on what one compressed chunk may inflate to at once (gzip bombs stay flat in memory).
INFLATE_CHUNK_BYTES: Final = 4 * 1024 * 1024
# The request headers an upload reads (the X-Metadata-* ones aside).
_READ: Final = frozenset(
    {b"content-type", b"content-encoding", b"content-length", b"x-access-token"}
)
# Built once: json.dumps() with options builds a new encoder per call.
_ENTRIES_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# Uploads up to this size are closed on the event loop (see _finish).
INLINE_FINISH_MAX_BYTES: Final = 1024 * 1024
# A multipart body up to this size (its Content-Length) is gathered whole before it is parsed:
# httpx, and so the SDK, writes a part's headers and its data separately, so they often
# arrive as two chunks.
WHOLE_BODY_MAX_BYTES: Final = 64 * 1024


async def _gunzip(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Inflate a gzip body (several concatenated members allowed, as Go's reader does)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    in_member = False
    seen_data = False
    try:
        async for chunk in body:
            pending = chunk
            while pending:
                seen_data = in_member = True
                out = inflater.decompress(pending, INFLATE_CHUNK_BYTES)
                pending = inflater.unconsumed_tail
                if inflater.eof:
                    pending = inflater.unused_data + pending
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    in_member = False
                if out:
                    yield out
    except zlib.error as exc:
        raise EnvdHTTPError(400, f"error decompressing request body: {exc}") from exc
    if in_member:
        tail = inflater.flush()  # output held back by the max_length bound
        if tail:
            yield tail
    if not seen_data or (in_member and not inflater.eof):
        raise EnvdHTTPError(400, "error decompressing request body: unexpected EOF")


def _decoded_body(request: Request, raw: str) -> AsyncIterator[bytes]:
    """The body as a stream of bytes, inflated as its Content-Encoding (`raw`) says."""
    encoding = raw.split(";", 1)[0].strip().lower()
    if encoding in ("", "identity"):
        return request.stream()
    if encoding == "gzip":
        return _gunzip(request.stream())
    raise EnvdHTTPError(
        400, f"error decompressing request body: unsupported Content-Encoding: {raw}"
    )


def _content_length(value: bytes | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


async def _open(path: str, user: User, content_length: int | None) -> UploadTarget:
    # A regular file is opened on the event loop (a few metadata syscalls, like the writes
    # that follow); anything else in a worker thread, where an open that waits is harmless.
    target = open_upload_target(path, user, content_length, may_block=False)
    if target is None:
        target = await anyio.to_thread.run_sync(open_upload_target, path, user, content_length)
    assert target is not None  # noqa: S101  # may_block=True always opens or raises
    return target


async def _finish(target: UploadTarget, metadata: dict[str, str]) -> dict[str, object]:
    # Closing may flush what was written (NFS, FUSE): a worker thread for big files, the
    # event loop for small ones, where the thread's round trip would cost more CPU than the
    # rest of the upload.
    if target.written <= INLINE_FINISH_MAX_BYTES:
        stored = target.finish(metadata)
    else:
        stored = await anyio.to_thread.run_sync(target.finish, metadata)
    return entry_json(target.path, stored)


async def _upload_raw(
    body: AsyncIterator[bytes],
    path: str,
    user: User,
    metadata: dict[str, str],
    content_length: int | None,
) -> list[dict[str, object]]:
    # The first chunk is read before the target is opened (and an existing file truncated),
    # so a body that fails at once, such as a corrupt gzip header, leaves the file untouched.
    first = await anext(body, b"")
    target = await _open(path, user, content_length)
    try:
        target.write(first)
        async for chunk in body:
            target.write(chunk)
    except BaseException:
        target.abort()
        raise
    return [await _finish(target, metadata)]


async def _gather(body: AsyncIterator[bytes], first: bytes, size: int) -> bytes:
    """`first` and the chunks after it, until they hold `size` bytes or the body ends."""
    pieces = [first]
    held = len(first)
    while held < size:
        chunk = await anext(body, None)
        if chunk is None:
            break
        pieces.append(chunk)
        held += len(chunk)
    return first if len(pieces) == 1 else b"".join(pieces)


class _MultipartUpload:
    """Writes each `file` part of one multipart request, in order."""

    def __init__(
        self,
        state: SandboxState,
        file_request: FileRequest,
        metadata: dict[str, str],
        content_length: int | None,
    ) -> None:
        self.state = state
        self.content_length = content_length
        self.user = file_request.user
        self.metadata = metadata
        self.path_param = file_request.path_param
        self.entries: list[dict[str, object]] = []
        self.target: UploadTarget | None = None

    async def run(self, body: AsyncIterator[bytes], boundary: bytes) -> list[dict[str, object]]:
        parts = PartEvents()
        # The parser is built only for a body that needs it (building one costs more than
        # splitting a small body), but a boundary it refuses is refused before the body is read.
        if len(boundary) > MAX_BOUNDARY_LENGTH:
            new_parser(parts, boundary)  # raises
        try:
            first = await anext(body, b"")
            if self.content_length is not None and self.content_length <= WHOLE_BODY_MAX_BYTES:
                first = await _gather(body, first, self.content_length)
            events = whole_body_events(first, boundary)
            if events is not None:
                for event in events:
                    await self._handle(event)
                async for _ in body:
                    pass  # what follows the closing delimiter, which python-multipart ignores
                return self.entries
            parser = new_parser(parts, boundary)
            await self._parse(parser, parts, first)
            async for chunk in body:
                await self._parse(parser, parts, chunk)
            if not parts.finished:
                # A quirk fix: the reference answers 500 for a truncated multipart body.
                raise EnvdHTTPError(400, "error parsing multipart body: unexpected EOF")
        except BaseException:
            if self.target is not None:
                self.target.abort()
            raise
        return self.entries

    async def _parse(self, parser: MultipartParser, parts: PartEvents, chunk: bytes) -> None:
        parts.chunk = chunk
        try:
            parser.write(chunk)
        except MultipartParseError as exc:
            raise EnvdHTTPError(400, f"error parsing multipart body: {exc}") from exc
        for event in parts.events:
            await self._handle(event)
        parts.events.clear()

    async def _handle(self, event: Event) -> None:
        if isinstance(event, dict):
            await self._begin_part(event)
        elif self.target is None:
            return  # data of a part that is not a file
        elif isinstance(event, memoryview):
            self.target.write(event)
        else:
            target, self.target = self.target, None
            self.entries.append(await _finish(target, self.metadata))

    async def _begin_part(self, headers: dict[str, bytes]) -> None:
        is_file, filename = part_filename(headers)
        if not is_file:
            return
        raw = self.path_param if self.path_param is not None else filename
        if raw is None:
            raise EnvdHTTPError(
                400,
                "error getting multipart custom part file name: "
                "filename not found in Content-Disposition header",
            )
        path = resolve_path(raw, self.user, self.state)
        uploaded = [str(entry["path"]) for entry in self.entries]
        if path in uploaded:
            message = (
                f"you cannot upload multiple files to the same path '{path}' in one upload "
                "request, only the first specified file was uploaded"
            )
            others = [p for p in uploaded if p != path]
            if len(others) > 1:
                message += f", also the following files were uploaded: {', '.join(others)}"
            raise EnvdHTTPError(400, message)
        self.target = await _open(path, self.user, self.content_length)


async def upload(
    request: Request, state: SandboxState, users: UserCache
) -> Response | BytesResponse:
    raw_headers = request.scope["headers"]
    headers = first_values(raw_headers, _READ)
    header_token = text(headers.get(b"x-access-token"))
    file_request = authorize_file_request(request, state, users, "write", header_token)
    user = file_request.user
    body = _decoded_body(request, headers.get(b"content-encoding", b"").decode("latin-1"))
    content_length = _content_length(headers.get(b"content-length"))
    metadata = parse_metadata(raw_headers)
    content_type = headers.get(b"content-type", b"").decode("latin-1")
    media_type, options = parse_options_header(content_type)
    try:
        if media_type == b"application/octet-stream":
            if file_request.path_param is None:
                raise EnvdHTTPError(400, "path query parameter is required for raw body upload")
            path = resolve_path(file_request.raw_path, user, state)
            entries = await _upload_raw(body, path, user, metadata, content_length)
        elif media_type.startswith(b"multipart/"):
            boundary = options.get(b"boundary")
            if not boundary:
                raise EnvdHTTPError(400, "error parsing multipart body: no boundary parameter")
            multipart = _MultipartUpload(state, file_request, metadata, content_length)
            entries = await multipart.run(body, boundary)
        else:
            raise EnvdHTTPError(
                400,
                f"unsupported content type: {content_type}, "
                "expected multipart/form-data or application/octet-stream",
            )
    except ClientDisconnect:
        log.info(
            "upload to %s abandoned: client disconnected", file_request.raw_path or "(multipart)"
        )
        return Response(status_code=400)  # nobody is left to read it
    # The reference sets no Content-Type; Go's server then sniffs this one.
    body_json = _ENTRIES_JSON.encode(entries) + "\n"
    return BytesResponse(body_json.encode(), b"text/plain; charset=utf-8")


def routes(state: SandboxState, users: UserCache) -> list[BaseRoute]:
    return [Route("/files", Endpoint(partial(upload, state=state, users=users)), methods=["POST"])]
