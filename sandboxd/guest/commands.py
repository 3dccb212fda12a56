"""Commands sandboxd runs inside its own sandboxes through envd's `process.Process/Start`: a
template build's RUN steps (`run`, their output streamed to the build's log), and a template's
start command (`start`, left running) and ready command (`wait_ready`) when a sandbox boots.

A `Command` is a shell command string and the shell the caller names to run it: E2B's SDKs
and builder run `/bin/bash -l -c CMD` (LOGIN_BASH), so RUN steps see what they would see
there, /etc/profile included (which on Debian sets PATH again, over an `env` PATH); an image
without bash gets `/bin/sh -c CMD` (POSIX_SH). `detect_shell` says which one a sandbox has.
Commands get no stdin (/dev/null): a build step that prompts reads end-of-file. envd execs
through a shell of its own, so a shell the image lacks is exit 127 and the shell's message on
stderr, like any missing program, not a refusal.

envd's processes outlive their Start stream (envd/process/service.py: leaving only
unsubscribes, as in Go envd), so a cancelled `run` leaves its command running until the
sandbox goes, and `start` needs no task of its own: it returns once envd reports the pid and
closes the stream; envd then reads the command's output and discards it (a template that wants
it kept redirects it in the command itself).
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import anyio

from envd._gen.process.process_pb import ProcessConfig, StartRequest, StartResponse
from sandboxd.errors import CommandError, CommandTimedOut, NotReady
from sandboxd.guest.connect_stream import RpcError, server_stream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.guest.client import EnvdClient

Shell = tuple[str, ...]
"""The argv a command string is appended to."""
LOGIN_BASH: Final[Shell] = ("/bin/bash", "-l", "-c")
POSIX_SH: Final[Shell] = ("/bin/sh", "-c")

OutputCallback = Callable[[str, bytes], None]
"""Called with ("stdout" | "stderr", bytes) for each piece of output, in order."""

# envd sends a keepalive event after this long without output (the header is in whole
# seconds); a stream silent for READ_TIMEOUT_S means envd stopped answering, whatever the
# command does (a build step may compile in silence for an hour).
KEEPALIVE_S: Final = 15
READ_TIMEOUT_S: Final = 4 * KEEPALIVE_S
CONNECT_TIMEOUT_S: Final = 5.0
READY_INTERVAL_S: Final = 0.1
_READY_OUTPUT_BYTES: Final = 4096
_START: Final = "/process.Process/Start"


@dataclass(frozen=True)
class Command:
    """`shell + (script,)` run as `user` in `cwd` (None: envd's default, the user's home unless
    /init set a workdir) with `env` over the sandbox's environment."""

    script: str
    shell: Shell
    user: str = "root"
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.script!r} as {self.user}"


async def run(
    envd: EnvdClient,
    sandbox_id: str,
    command: Command,
    *,
    on_output: OutputCallback | None = None,
    token: str | None = None,
    timeout_s: float | None = None,
) -> int:
    """Run `command` to its end and return its exit code (-1 when a signal killed it), calling
    `on_output` as output arrives. `timeout_s` is the command's life: envd kills its process
    group then.

    Raises:
        CommandTimedOut: `timeout_s` passed first.
        CommandError: envd refused the command (an unknown user, a missing cwd: envd's Connect
            code and message in the text), or its stream ended without the command's end.
        EnvdUnreachable: envd did not answer.
    """
    end = None
    async with _started(envd, sandbox_id, command, token, timeout_s) as (_pid, events):
        async for response in events:
            which = response.event.event if response.event is not None else None
            if which is None:
                continue
            if which.field == "data" and which.value.output is not None:
                if on_output is not None:
                    on_output(which.value.output.field, which.value.output.value)
            elif which.field == "end":
                end = which.value  # the end-of-stream message follows: read on to it
    if end is None:
        raise CommandError(f"{command} in {sandbox_id}: envd's stream ended before it did")
    return end.exit_code


async def start(
    envd: EnvdClient, sandbox_id: str, command: Command, *, token: str | None = None
) -> int:
    """Start a long-running `command` (a template's start command) and return its pid once
    envd reports it started; it keeps running, its output discarded, until it exits or the
    sandbox goes.

    Raises:
        CommandError: envd refused the command (as for `run`).
        EnvdUnreachable: envd did not answer.
    """
    async with _started(envd, sandbox_id, command, token, None) as (pid, _events):
        return pid


async def wait_ready(
    envd: EnvdClient,
    sandbox_id: str,
    ready: Command,
    *,
    timeout_s: float,
    token: str | None = None,
    interval_s: float = READY_INTERVAL_S,
) -> None:
    """Run `ready` (E2B's `ss -Htuln 'sport = :3000' | grep -q .` and the like) every
    `interval_s` until it exits 0. An attempt still running at the deadline is killed by envd.

    Raises:
        NotReady: `timeout_s` passed without a success; the text has the last attempt's exit
            code and the end of its output.
        CommandError: envd refused the command (retrying would not change that).
        EnvdUnreachable: envd did not answer.
    """
    deadline = time.monotonic() + timeout_s
    attempts, last = 0, "no attempt finished"
    while (remaining := deadline - time.monotonic()) > 0:
        attempts += 1
        output = Tail()
        try:
            code = await run(
                envd, sandbox_id, ready, on_output=output, token=token, timeout_s=remaining
            )
        except CommandTimedOut:
            last = f"the last attempt was still running, output {output}"
            break
        if code == 0:
            return
        last = f"the last attempt exited {code}, output {output}"
        await anyio.sleep(min(interval_s, max(deadline - time.monotonic(), 0)))
    raise NotReady(
        f"ready command {ready} in {sandbox_id} did not succeed within {timeout_s:g} s "
        f"({attempts} attempts): {last}"
    )


async def detect_shell(envd: EnvdClient, sandbox_id: str, *, token: str | None = None) -> Shell:
    """LOGIN_BASH when the sandbox has /bin/bash, else POSIX_SH (also when it has no /bin/sh
    either: its commands will then exit 127).

    Raises:
        CommandError: envd refused the probe.
        EnvdUnreachable: envd did not answer.
    """
    probe = Command("test -x /bin/bash", shell=POSIX_SH)
    return LOGIN_BASH if await run(envd, sandbox_id, probe, token=token) == 0 else POSIX_SH


@contextlib.asynccontextmanager
async def _started(
    envd: EnvdClient,
    sandbox_id: str,
    command: Command,
    token: str | None,
    timeout_s: float | None,
) -> AsyncIterator[tuple[int, AsyncIterator[StartResponse]]]:
    """The Start stream, entered once envd reported the pid; its RpcErrors (also those
    raised while the block iterates it) as CommandErrors."""
    config = ProcessConfig(
        cmd=command.shell[0], args=[*command.shell[1:], command.script], envs=dict(command.env)
    )
    if command.cwd is not None:
        config.cwd = command.cwd
    headers = [
        # envd runs a Start as the Basic-auth user (Go envd's convention; no password).
        (b"Authorization", b"Basic " + base64.b64encode(f"{command.user}:".encode())),
        (b"Keepalive-Ping-Interval", str(KEEPALIVE_S).encode()),
    ]
    if timeout_s is not None:
        # Connect's deadline; on Start envd also kills the process at it.
        headers.append((b"Connect-Timeout-Ms", str(max(1, round(timeout_s * 1000))).encode()))
    what = f"{command} in {sandbox_id}"
    try:
        async with server_stream(
            envd, sandbox_id, _START, StartRequest(process=config, stdin=False), StartResponse,
            headers=headers, token=token, connect_timeout_s=CONNECT_TIMEOUT_S,
            read_timeout_s=READ_TIMEOUT_S,
        ) as events:  # fmt: skip
            first = await anext(events, None)
            which = first.event.event if first is not None and first.event is not None else None
            if which is None or which.field != "start":
                raise CommandError(f"{what}: envd's stream did not start with the pid")
            yield which.value.pid, events
    except RpcError as exc:
        if exc.code == "deadline_exceeded" and timeout_s is not None:
            raise CommandTimedOut(f"{what}: still running after {timeout_s:g} s") from None
        raise CommandError(f"{what}: envd refused it or failed: {exc}") from None


class Tail:
    """The last few KiB of a command's output, stdout and stderr as they came."""

    def __init__(self) -> None:
        self._kept = bytearray()

    def __call__(self, _kind: str, data: bytes) -> None:
        self._kept += data
        del self._kept[:-_READY_OUTPUT_BYTES]

    def __str__(self) -> str:
        return repr(self._kept.decode(errors="replace")) if self._kept else "none"
