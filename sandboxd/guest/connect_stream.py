"""Connect server-streaming calls to envd, as sandboxd makes them (the proxy relays clients'
own): the request as one envelope on the proto codec (the generated messages are envd's, so
the two cannot drift), the answer's envelopes decoded as they arrive, and the error of its
end-of-stream message raised. connectrpc's own client cannot be used: it brings its own HTTP
stack, and envd is reachable only through sockets made in the sandbox's network namespace
(EnvdClient)."""

from __future__ import annotations

import contextlib
import json
import struct
from typing import TYPE_CHECKING, Final, TypeVar

from protobuf import Message

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Iterable

    from sandboxd.guest.client import EnvdClient

M = TypeVar("M", bound=Message)

_PREFIX: Final = struct.Struct(">BI")  # flags, length
_COMPRESSED: Final = 0x01
_END_STREAM: Final = 0x02
# envd's events are at most a quarter MiB of output (envd/process/streams.py): anything much
# larger is not envd's answer, and is not buffered whole.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
_ERROR_BODY_BYTES: Final = 64 * 1024


class RpcError(Exception):
    """The call failed as Connect says: `code` is Connect's code name (`invalid_argument`,
    `unauthenticated`, ...), or `http_STATUS` for an answer that is not a Connect stream."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@contextlib.asynccontextmanager
async def server_stream(
    envd: EnvdClient,
    sandbox_id: str,
    procedure: str,
    request: Message,
    response_type: type[M],
    *,
    headers: Iterable[tuple[bytes, bytes]] = (),
    token: str | None = None,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> AsyncIterator[AsyncIterator[M]]:
    """The responses of `procedure` (`/process.Process/Start`) as they arrive; leaving the
    block closes the call. Iterating raises RpcError for the stream's error, and when the
    body ends without Connect's end-of-stream message or is malformed.

    Raises:
        EnvdUnreachable: envd did not answer (from EnvdClient), here or while iterating.
    """
    envelope = request.to_binary()
    content = _PREFIX.pack(0, len(envelope)) + envelope
    call_headers = [(b"Content-Type", b"application/connect+proto"), *headers]
    async with envd.stream(
        sandbox_id, procedure, content=content, headers=call_headers, token=token,
        connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
    ) as (status, chunks):  # fmt: skip
        if status != 200:
            raise await _http_error(status, chunks)
        messages = _messages(chunks, response_type)
        try:
            yield messages
        finally:
            await messages.aclose()


async def _messages(
    chunks: AsyncIterator[bytes], response_type: type[M]
) -> AsyncGenerator[M, None]:
    buffer = bytearray()
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= _PREFIX.size:
            flags, length = _PREFIX.unpack_from(buffer)
            if length > MAX_MESSAGE_BYTES:
                raise RpcError("internal", f"a message of {length} bytes from envd")
            if len(buffer) < _PREFIX.size + length:
                break
            body = bytes(buffer[_PREFIX.size : _PREFIX.size + length])
            del buffer[: _PREFIX.size + length]
            if flags & _COMPRESSED:  # never asked for: sandboxd sends no Accept-Encoding
                raise RpcError("internal", "a compressed message from envd")
            if flags & _END_STREAM:
                _raise_error_of(body)
                return
            try:
                yield response_type.from_binary(body)
            except ValueError as exc:
                raise RpcError("internal", f"a malformed message from envd: {exc}") from None
    raise RpcError("internal", "envd's stream ended without its end-of-stream message")


def _raise_error_of(end_of_stream: bytes) -> None:
    """Raise the error an end-of-stream message carries; return when it carries none."""
    try:
        error = json.loads(end_of_stream).get("error")
    except (ValueError, AttributeError):
        raise RpcError("internal", "a malformed end-of-stream message from envd") from None
    if error is not None:
        raise RpcError(str(error.get("code", "unknown")), str(error.get("message", "")))


async def _http_error(status: int, chunks: AsyncIterator[bytes]) -> RpcError:
    """An answer that is not a stream (an unknown procedure, a refused content type, a
    proxy's error page): its status and the start of its body."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) >= _ERROR_BODY_BYTES:
            break
    text = bytes(body[:_ERROR_BODY_BYTES]).decode(errors="replace").strip()
    try:
        error = json.loads(text)
        code, message = error["code"], str(error["message"])
    except (ValueError, KeyError, TypeError):
        return RpcError(f"http_{status}", text or "(no body)")
    # envd's plain-HTTP errors (a refused token) carry the status as their code.
    return RpcError(code if isinstance(code, str) else f"http_{status}", message)
