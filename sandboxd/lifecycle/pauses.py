"""A sandbox's pause and its way back, under its lock (sandboxd.lifecycle.manager takes it): a
freeze that keeps processes and memory, its files written to disk as well (a pause layer, as a
pause to disk's: a crash or reboot that ends its processes leaves it paused to disk, not gone),
or a pause to disk (sandboxd.lifecycle.disk_pause); a thaw, or a boot from the files. Each
change is recorded before anyone is told."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import TYPE_CHECKING

from sandboxd.errors import DiskFull, RegistryError, SandboxError, WrongState
from sandboxd.guest.init import init_envd
from sandboxd.ids import now_us
from sandboxd.lifecycle.disk_pause import FULL, disk_image

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.guest.client import EnvdClient
    from sandboxd.lifecycle.disk_pause import DiskPauses
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.store.interface import Store


class Pauses:
    """Pauses and resumes for the lifecycle's manager; `gone(id)` tells the proxy and the
    sampler that a sandbox stopped serving."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        envd: EnvdClient,
        disks: DiskPauses,
        gone: Callable[[str], None],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.envd = envd
        self.disks = disks
        self._gone = gone

    async def pause(self, sandbox: Sandbox, memory: bool = True) -> None:
        """Freeze a running sandbox (processes and memory kept, its files written to disk as
        well: a pause layer it boots from should it lose its processes), or without `memory`
        pause it to disk.

        Raises:
            WrongState: already paused; SandboxError: the pause failed (it runs on).
        """
        if not sandbox.running:
            raise WrongState(f"Error pausing sandbox - sandbox '{sandbox.id}' is already paused")
        sandbox.row.state = "paused"  # listed as paused while pausing, as the reference
        self._gone(sandbox.id)
        try:
            if memory:
                box = sandbox.live()
                layer = await self.disks.export_frozen(box)
                written = disk_image(
                    box.image, box.limits, box.mounts, layer, self.disks.layers.root
                )
            else:
                await self.disks.pause(sandbox)
        except SandboxError as exc:
            sandbox.row.state = "running"
            if isinstance(exc, (DiskFull, RegistryError)):  # 507, 503: as they are
                raise
            raise SandboxError(f"pausing {sandbox.id}: {exc}") from exc
        if memory:  # a pause to disk is recorded before the sandbox leaves the host
            row = sandbox.row
            row.end_at, row.pause_mode, row.disk_image = now_us(), FULL, written
            await self.store.write(
                functools.partial(self.store.put_sandbox, row),
                functools.partial(self.store.add_event, row.end_at, sandbox.id, "paused"),
            )

    async def thaw(self, sandbox: Sandbox, timeout_s: int, memory: bool = True) -> None:
        """Run a paused sandbox again for `timeout_s`: thawed (the layer its full pause wrote
        deleted after), or booted from its files when it is paused to disk, without `memory`,
        or when its processes are gone (killed while it was frozen).

        Raises:
            SandboxError: the thaw or boot failed (it stays paused).
        """
        row = sandbox.row
        written = None
        box = sandbox.box
        if box is None or not memory or not box.cgroups.populated():
            await self.disks.reboot(sandbox)  # booted, its /init taken; or still paused
        else:
            await self._thaw_box(sandbox, box)
            written = row.disk_image
        row.state, row.pause_mode, row.disk_image, row.started_at = "running", None, None, now_us()
        row.end_at = row.started_at + timeout_s * 1_000_000
        await self.store.write(
            functools.partial(self.store.put_sandbox, row),
            functools.partial(self.store.add_event, row.started_at, sandbox.id, "resumed"),
        )
        if written is not None:  # recorded as gone first: a crash here leaves only litter
            await asyncio.to_thread(self.disks.drop_written, written)

    async def _thaw_box(self, sandbox: Sandbox, box: Box) -> None:
        try:
            await self.runtime.thaw(box)
        except SandboxError as exc:
            raise SandboxError(f"resuming {sandbox.id}: {exc}") from exc
        try:
            # A thawed envd still has everything /init gave it; sending it again (the same env
            # vars, token and user) is idempotent and restores an envd that restarted.
            await init_envd(self.envd, sandbox.id, sandbox.envd_init)
        except SandboxError:
            # Still paused as far as anyone was told: frozen again (no CPU, no TTL to miss),
            # and the next resume tries again.
            with contextlib.suppress(SandboxError):
                await self.runtime.freeze(box)
            raise
