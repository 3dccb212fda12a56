"""Client-side helpers every test area shares."""

from __future__ import annotations

import base64
import json
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import httpx

# The SDKs select the user with Basic auth and an empty password.
AS_USER = {"authorization": "Basic " + base64.b64encode(b"user:").decode()}


def envelope(message: dict[str, object]) -> bytes:
    """One Connect envelope of `message` in JSON (content-type application/connect+json)."""
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


def start_request(script: str) -> bytes:
    """The body of a Process Start stream that runs `script` with /bin/sh."""
    return envelope({"process": {"cmd": "/bin/sh", "args": ["-c", script]}})


def exit_and_stdout(stream: bytes) -> tuple[int, str]:
    """(exit code, stdout) of a whole Process Start stream."""
    stdout, code = b"", None
    while stream:
        size = int.from_bytes(stream[1:5], "big")
        event = json.loads(stream[5 : 5 + size]).get("event", {})
        stream = stream[5 + size :]
        stdout += base64.b64decode(event.get("data", {}).get("stdout", ""))
        if "end" in event:
            code = event["end"].get("exitCode", 0)
    assert code is not None, "no end event"
    return code, stdout.decode()


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Connect envelopes of a streamed response, each as soon as it is whole."""
    buffer = b""
    async for chunk in response.aiter_raw():
        buffer += chunk
        while len(buffer) >= 5:
            _, size = struct.unpack(">BI", buffer[:5])
            if len(buffer) < 5 + size:
                break
            yield json.loads(buffer[5 : 5 + size])
            buffer = buffer[5 + size :]
