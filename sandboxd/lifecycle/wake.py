"""Auto-resume on traffic (E2B's `autoResume`): a request through the proxy for a paused sandbox
whose create enabled it resumes the sandbox, once, whoever else asks meanwhile. Only a frozen
sandbox wakes: one paused to disk must be resumed explicitly (a wake never boots). The request
must carry the sandbox's access token before anything is resumed: envd's for envd's port of a
secure sandbox, the traffic token for its own ports when public traffic is off.

The sandbox runs on for its create's timeout, at least a minute and at most the longest life
(sandboxd.lifecycle.lifetimes.Lifetimes.woken)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from typing import TYPE_CHECKING

from sandboxd.errors import StillTransitioning, WakeRefused
from sandboxd.guest.client import ENVD_PORT
from sandboxd.lifecycle.disk_pause import FILESYSTEM

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from sandboxd.lifecycle.ingress import Credentials
    from sandboxd.lifecycle.lifetimes import Lifetimes
    from sandboxd.lifecycle.pauses import Pauses
    from sandboxd.lifecycle.sandbox import Sandbox

# How long a wake waits for a pause or resume under way (the reference's transition budget).
TRANSITION_WAIT_S = 60.0


def auto_resumes(sandbox: Sandbox) -> bool:
    """Whether its create enabled auto-resume (`autoResume: {"enabled": true}`)."""
    auto_resume = sandbox.row.options.get("autoResume") or {}
    return auto_resume.get("enabled") is True


def check_credentials(sandbox: Sandbox, port: int, credentials: Credentials) -> None:
    """Raises WakeRefused unless the request carries the token its port needs: envd's token of
    a secure sandbox on envd's port, the traffic token on the others when it has one."""
    if port == ENVD_PORT:
        expected, given = sandbox.token, credentials.envd_token
    else:
        expected, given = sandbox.ingress.traffic_token, credentials.traffic_token
    if expected is None:
        return
    if given is None or not hmac.compare_digest(given.encode(), expected.encode()):
        raise WakeRefused(f"sandbox {sandbox.id}: the request's token does not resume it")


@contextlib.asynccontextmanager
async def held(
    lock: asyncio.Lock, sandbox_id: str, wait_s: float = TRANSITION_WAIT_S
) -> AsyncIterator[None]:
    """The sandbox's `lock` held for the block, once the pause or resume holding it ended.

    Raises:
        StillTransitioning: it was still held after `wait_s`.
    """
    try:
        async with asyncio.timeout(wait_s):
            await lock.acquire()
    except TimeoutError:
        raise StillTransitioning(f"Sandbox {sandbox_id} is still transitioning") from None
    try:
        yield
    finally:
        lock.release()


class Waker:
    """Wakes paused sandboxes for the proxy; `find(id)` is the manager's sandbox of that id (None
    when unknown or being killed)."""

    def __init__(self, find: Callable[[str], Sandbox | None], pauses: Pauses,
                 lifetimes: Lifetimes) -> None:  # fmt: skip
        self.find = find
        self.pauses = pauses
        self.lifetimes = lifetimes

    async def wake(self, sandbox_id: str, port: int, credentials: Credentials) -> None:
        """Resume the sandbox if it is paused, frozen, with auto-resume, and the credentials
        fit; else leave it as it is (the caller sees whether it runs). A pause or resume under
        way is waited for, and the sandbox looked at again under its lock: of concurrent
        wakes, the first resumes it and the others find it running.

        Raises:
            StillTransitioning: its lock was still held after TRANSITION_WAIT_S.
            WakeRefused: the credentials do not fit (it stays paused).
            SandboxError: the thaw failed (it stays paused).
        """
        sandbox = self.find(sandbox_id)
        if sandbox is None or not auto_resumes(sandbox):
            return
        async with held(sandbox.lock, sandbox_id):
            if self.find(sandbox_id) is not sandbox or sandbox.running:
                return  # killed meanwhile, or resumed by another request
            if sandbox.box is None or sandbox.row.pause_mode == FILESYSTEM:
                return  # paused to disk: resumed explicitly only
            check_credentials(sandbox, port, credentials)
            await self.pauses.thaw(sandbox, self.lifetimes.woken(sandbox.row.timeout_s))
