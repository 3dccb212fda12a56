"""A build sandbox: a sandbox of the image built so far, booted by the same runtime with the
same isolation and network as any sandbox (and the build's CPU and memory), in which one step
runs; its writable layer then becomes the step's layer. Not listed anywhere: sandboxd's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.guest import commands
from sandboxd.ids import new_sandbox_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from sandboxd.guest.client import EnvdClient
    from sandboxd.guest.commands import Command
    from sandboxd.host.cgroups import Limits
    from sandboxd.layers.store import LayerStore
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.templates.image import TemplateImage

log = logging.getLogger("sandboxd.builds.build_sandbox")


class BuildSandboxes:
    """Boots build sandboxes and reaches their envd through `envd`."""

    def __init__(self, runtime: Runtime, envd: EnvdClient) -> None:
        self.runtime = runtime
        self.envd = envd

    @contextlib.asynccontextmanager
    async def booted(
        self, image: TemplateImage, limits: Limits, disk_mb: int
    ) -> AsyncIterator[Box]:
        """A build sandbox of `image`, killed on the way out, whatever happened."""
        box = await self.runtime.boot(new_sandbox_id(), image.boot_image, limits, disk_mb)
        try:
            async with self.envd.reaching(box.id, box.dialer):
                yield box
        finally:
            try:
                await asyncio.shield(self.runtime.kill(box))
            except SandboxError:
                log.exception("build sandbox %s: killing it left something", box.id)

    async def run(self, box: Box, command: Command, on_output: Callable[[str, bytes], None]) -> int:
        """Run `command`; its exit code (-1: killed by a signal)."""
        return await commands.run(self.envd, box.id, command, on_output=on_output)

    async def snapshot(self, box: Box, layers: LayerStore, name: str) -> None:
        """The sandbox's writable layer so far, as the layer `name` (the sandbox frozen, so
        that nothing it left running writes meanwhile)."""
        await self.runtime.freeze(box)

        def fill(dest: Path) -> None:
            self.runtime.export_diff(box, dest)

        await asyncio.to_thread(layers.add, name, fill)
