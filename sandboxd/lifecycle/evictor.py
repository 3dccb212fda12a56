"""The evictor: at a sandbox's end (endAt) it is killed, or paused when it was created with
autoPause (to disk with autoPauseMemory false); and a kill that stopped halfway is carried on.
The reference polls every 50 ms too."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.ids import now_us

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandboxd.lifecycle.sandbox import Sandbox

log = logging.getLogger("sandboxd.lifecycle.evictor")

EVICT_POLL_S = 0.05
EXPIRE_RETRY_S = 30.0  # after a pause or kill at the end failed


class Evictor:
    """Ends the sandboxes `sandboxes()` lists when their time is up, with `end(sandbox)` (which
    looks again under the sandbox's lock and does nothing when the end moved meanwhile)."""

    def __init__(
        self,
        sandboxes: Callable[[], list[Sandbox]],
        end: Callable[[Sandbox], Awaitable[None]],
    ) -> None:
        self._sandboxes = sandboxes
        self._end = end
        self._busy: set[str] = set()  # being ended, or kept off for a while

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            while True:
                await asyncio.sleep(EVICT_POLL_S)
                now = now_us()
                for sandbox in self._sandboxes():
                    ended = sandbox.running and sandbox.row.end_at <= now
                    if (ended or sandbox.dying) and sandbox.id not in self._busy:
                        self._busy.add(sandbox.id)
                        group.create_task(self._expire(sandbox))

    async def _expire(self, sandbox: Sandbox) -> None:
        retry_in = 0.0
        try:
            await self._end(sandbox)
        except SandboxError as exc:
            # Again later, not at every poll: a mount that will not go fails the same way 20
            # times a second.
            retry_in = EXPIRE_RETRY_S
            log.warning("sandbox %s at its end: %s (again in %g s)", sandbox.id, exc, retry_in)
        except Exception:  # one sandbox's surprise must not end the evictor for all
            retry_in = EXPIRE_RETRY_S
            log.exception("sandbox %s at its end (again in %g s)", sandbox.id, retry_in)
        finally:
            self.keep_off(sandbox.id, retry_in)

    def keep_off(self, sandbox_id: str, seconds: float) -> None:
        """Leave the sandbox alone for `seconds` (a kill that failed: a DELETE may come first)."""
        self._busy.add(sandbox_id)
        asyncio.get_running_loop().call_later(seconds, self._busy.discard, sandbox_id)
