"""envd in a booted sandbox over the wire, as the SDKs reach it: through sandboxd's proxy
(tests/sandboxd/proxied.py) with httpx, Connect for commands and HTTP for files."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from tests.client import frames, start_request

if TYPE_CHECKING:
    import httpx

    from sandboxd.runtime.engine import Box


def routed(box: Box) -> dict[str, str]:
    return {"e2b-sandbox-id": box.id, "e2b-sandbox-port": "49983"}


def as_user(name: str) -> dict[str, str]:
    """The SDKs' way to choose the user: Basic auth with an empty password."""
    return {"authorization": "Basic " + base64.b64encode(f"{name}:".encode()).decode()}


async def run(client: httpx.AsyncClient, box: Box, script: str, user: str) -> tuple[int, str]:
    """(exit code, stdout) of `sh -c script` started through envd's Process.Start as `user`."""
    headers = {"content-type": "application/connect+json", **as_user(user), **routed(box)}
    stdout = b""
    end = None
    async with client.stream(
        "POST", "/process.Process/Start", content=start_request(script), headers=headers
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for frame in frames(response):
            event = frame.get("event", {})
            stdout += base64.b64decode(event.get("data", {}).get("stdout", ""))
            end = event.get("end", end)
    assert end is not None, f"{script!r}: the stream ended without an end event"
    return int(end.get("exitCode", 0)), stdout.decode()


async def output(client: httpx.AsyncClient, box: Box, script: str, user: str) -> str:
    """The stdout of `run`, which must exit 0."""
    code, stdout = await run(client, box, script, user)
    assert code == 0, f"{script!r} as {user} exited {code}"
    return stdout
