"""envd's readiness inside a sandbox: `GET /health` over a socket in the sandbox's network
namespace, answered 204 once envd listens (its unit is Type=notify, so this is also "started")."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandboxd.host.netns import NetNamespace

ENVD_PORT = 49983
_REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


async def health_status(netns: NetNamespace, port: int = ENVD_PORT, timeout_s: float = 1) -> int:
    """The HTTP status of envd's `/health`, or 0 when nothing answered in `timeout_s` (refused,
    reset, not HTTP, or a frozen sandbox)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await netns.open_connection(port)
            writer.write(_REQUEST)
            status_line = await reader.readline()
    except (OSError, TimeoutError):
        return 0
    finally:
        if writer is not None:
            writer.close()
    parts = status_line.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return 0
    return int(parts[1])
