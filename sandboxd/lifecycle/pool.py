"""The warm pool: sandboxes booted ahead of time per template image (layers, init, start and
ready commands) and disk size (everything on the host made: uid range, disk, idmapped layers,
overlay, container; the template's start command running and ready), envd up but not yet given
its /init, so a create only needs the /init. Refilled in the background."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandboxd.host.cgroups import Limits
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.templates.image import TemplateImage

    Boot = Callable[[TemplateImage, Limits, int], Awaitable[Box]]

log = logging.getLogger("sandboxd.lifecycle.pool")
RETRY_AFTER_FAILURE_S = 5
# A refill boot costs about a CPU-second; started at once it competes with the create that took
# the box and with the client's first requests (with two cores under load: create → first
# command 250 ms instead of 165 ms, p50). Those come within milliseconds of the create.
REFILL_AFTER_TAKE_S = 0.5


class WarmPool:
    """Up to `size` booted sandboxes per template image and disk size, each made by `boot`."""

    def __init__(self, runtime: Runtime, size: int, boot: Boot) -> None:
        self.runtime = runtime
        self.size = size
        self._boot = boot
        self._boxes: dict[tuple[str, int], list[Box]] = {}
        self._fillers: dict[tuple[str, int], asyncio.Task[None]] = {}

    async def take(self, image: TemplateImage, limits: Limits, disk_mb: int) -> Box | None:
        """A booted sandbox of `image` with a disk of `disk_mb` and `limits` applied, or None;
        starts a refill."""
        boxes = self._boxes.get((image.key(), disk_mb), [])
        box = boxes.pop() if boxes else None
        self.fill(image, limits, disk_mb, after_s=REFILL_AFTER_TAKE_S)
        if box is None:
            return None
        try:
            self.runtime.set_limits(box, limits)
        except OSError as exc:  # e.g. a memory limit below what the waiting sandbox uses
            log.warning("warm sandbox %s cannot take the limits %s (%s): booting one instead",
                        box.id, limits, exc.strerror)  # fmt: skip
            try:
                await self.runtime.kill(box)
            except SandboxError as kill_error:
                log.warning("warm pool: killing %s: %s", box.id, kill_error)
            return None
        return box

    def waiting(self, image: TemplateImage, disk_mb: int) -> int:
        """How many booted sandboxes of `image` with `disk_mb` wait to be taken."""
        return len(self._boxes.get((image.key(), disk_mb), ()))

    def fill(self, image: TemplateImage, limits: Limits, disk_mb: int, after_s: float = 0) -> None:
        """Boot in the background, starting in `after_s`, until `image` with `disk_mb` has
        `size` waiting sandboxes."""
        if self.size <= 0:
            return
        key = (image.key(), disk_mb)
        filler = self._fillers.get(key)
        if filler is None or filler.done():
            self._fillers[key] = asyncio.create_task(self._fill(image, disk_mb, limits, after_s))

    async def _fill(
        self, image: TemplateImage, disk_mb: int, limits: Limits, after_s: float
    ) -> None:
        await asyncio.sleep(after_s)
        boxes = self._boxes.setdefault((image.key(), disk_mb), [])
        while len(boxes) < self.size:
            try:
                box = await self._boot(image, limits, disk_mb)
                boxes.append(box)
                log.info("warm pool: sandbox %s waiting", box.id)
            except SandboxError as exc:
                log.warning("warm pool for %s: %s", image.layers[-1], exc)
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)

    async def close(self) -> None:
        """Stop refilling and kill the waiting sandboxes (they have no record to survive a
        restart with)."""
        for filler in self._fillers.values():
            filler.cancel()
        await asyncio.gather(*self._fillers.values(), return_exceptions=True)
        for boxes in self._boxes.values():
            for box in boxes:
                try:
                    await self.runtime.kill(box)
                except SandboxError as exc:
                    log.warning("warm pool: killing %s: %s", box.id, exc)
            boxes.clear()
