"""Commands run by envd inside a served sandbox, reached through its network namespace as the
server reaches it (the proxy is not part of these tests): a script's output, or one left running."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sandboxd.guest.client import EnvdClient
from sandboxd.guest.commands import POSIX_SH, Command, start

if TYPE_CHECKING:
    from tests.sandboxd.serving import Sandboxd


def sh(server: Sandboxd, sandbox_id: str, script: str, token: str | None) -> str:
    """`script` run by envd inside the sandbox as root; its stdout (it must exit 0)."""
    return server.sh(sandbox_id, script, token)


def background(server: Sandboxd, sandbox_id: str, script: str, token: str | None) -> None:
    """`script` started inside the sandbox and left running."""

    async def go() -> None:
        netns = server.netns(sandbox_id)
        client = EnvdClient()
        client.reach(sandbox_id, netns)
        try:
            await start(client, sandbox_id, Command(script, POSIX_SH), token=token)
        finally:
            await client.aclose()
            netns.close()

    asyncio.run(go())
