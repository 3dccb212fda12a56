"""Whether envd in a sandbox serves yet: the probe the runtime polls while a sandbox boots
(sandboxd.runtime.dialer.ReadinessProbe), and the name of envd's systemd unit, which the runtime
gives the host's priority. Handed to the runtime by serve, so that the runtime knows nothing of
what runs inside."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sandboxd.guest.client import ENVD_PORT

if TYPE_CHECKING:
    from sandboxd.runtime.dialer import Dialer

ENVD_UNIT = "envd.service"
_HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


async def envd_ready(dialer: Dialer, port: int = ENVD_PORT, timeout_s: float = 1) -> bool:
    """Whether envd's `/health` answers 204 within `timeout_s` (204 once envd listens; its unit
    is Type=notify, so this is also "started"). False for anything else: refused, reset, not
    HTTP, another status, or no answer in time (a frozen sandbox)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await dialer.open_connection(port)
            writer.write(_HEALTH)
            status_line = await reader.readline()
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()
    parts = status_line.split()
    return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1] == b"204"
