"""A template's start and ready commands, run in a sandbox of it: the start command in the
background (as the template's user, in its workdir, with its env), then the ready command until
it exits 0. The build's finalize phase checks them; every sandbox of the template runs them
before it is handed out (the warm pool holds sandboxes that are ready).

The start command is watched until the ready command succeeds: one that fails meanwhile (a
missing program, exit 127) ends the wait at once with its exit code and output, where the ready
command would only have failed until its timeout. One that exits 0 (`systemctl start app`,
which returns once the unit started) leaves the ready command to decide."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sandboxd.errors import CommandError
from sandboxd.guest import commands

if TYPE_CHECKING:
    from sandboxd.guest.client import EnvdClient
    from sandboxd.guest.commands import Command, OutputCallback

READY_TIMEOUT_S = 120


class StartFailed(CommandError):
    """The start command exited non-zero before the ready command succeeded; the message has
    its exit code and the end of its output."""


async def start_and_wait(
    envd: EnvdClient,
    sandbox_id: str,
    start: Command | None,
    ready: Command | None,
    timeout_s: float = READY_TIMEOUT_S,
    on_output: OutputCallback | None = None,
) -> None:
    """Start the `start` command and wait for the `ready` command (either None: the template
    has none); `on_output` gets the start command's output until then.

    Raises:
        StartFailed: the start command failed first; CommandError: it could not start
            (NotReady: the ready command did not succeed within `timeout_s`, its last output in
            the message); EnvdUnreachable.
    """
    if start is None:
        if ready is not None:
            await commands.wait_ready(envd, sandbox_id, ready, timeout_s=timeout_s)
        return
    if ready is None:
        await commands.start(envd, sandbox_id, start)
        return
    await _watched(envd, sandbox_id, start, ready, timeout_s, on_output)


async def _watched(
    envd: EnvdClient,
    sandbox_id: str,
    start: Command,
    ready: Command,
    timeout_s: float,
    on_output: OutputCallback | None,
) -> None:
    tail = commands.Tail()

    def output(stream: str, data: bytes) -> None:
        tail(stream, data)
        if on_output is not None:
            on_output(stream, data)

    # Leaving the start command's stream only unsubscribes from it: it keeps running.
    running = asyncio.ensure_future(commands.run(envd, sandbox_id, start, on_output=output))
    waiting = asyncio.ensure_future(
        commands.wait_ready(envd, sandbox_id, ready, timeout_s=timeout_s)
    )
    try:
        await asyncio.wait((running, waiting), return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            code = running.result()
            if code != 0:
                raise StartFailed(
                    f"start command {start} in {sandbox_id} exited with code {code} before the "
                    f"ready command succeeded, output {tail}"
                )
        await waiting
    finally:
        for task in (running, waiting):
            task.cancel()
        await asyncio.gather(running, waiting, return_exceptions=True)
