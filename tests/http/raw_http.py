"""HTTP/1.1 on a bare socket, for tests that need control over when body bytes are sent."""

from __future__ import annotations

import select
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

CHUNK_BYTES = 64 * 1024


def post_chunked_until_answered(
    sock: socket.socket, path: bytes, body: bytes, *, timeout_s: float = 10
) -> bytes:
    """POST `body` in chunked encoding, without the final chunk, and stop sending as soon as
    an answer arrives; returns its status line ("" if the connection was closed silently).

    A server that waits for the whole body never answers: the read then times out.
    """
    sock.sendall(
        b"POST %s HTTP/1.1\r\nHost: envd\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" % path
    )
    for start in range(0, len(body), CHUNK_BYTES):
        if select.select([sock], [], [], 0)[0]:
            break  # answered (or closed) before the end of the body
        piece = body[start : start + CHUNK_BYTES]
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.settimeout(timeout_s)
    return sock.recv(65536).partition(b"\r\n")[0]
