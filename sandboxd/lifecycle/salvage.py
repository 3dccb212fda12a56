"""What a restart makes of a sandbox whose processes a crash or a reboot ended (serve and every
sandbox process killed; on a reboot, their mounts, loop devices and cgroups gone too): its files
stay, and it is listed paused to disk (`pauseMode` "filesystem"), resumed by a boot from them as
any pause to disk. A full pause wrote its pause layer when it froze (sandboxd.lifecycle.pauses);
a sandbox that was running has its writable layer, still in its directory, exported now as a
pause layer (the runtime's `export_stopped`). Only a sandbox of which nothing is left is dropped
(event "lost")."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxError
from sandboxd.ids import now_us
from sandboxd.lifecycle.disk_pause import FILESYSTEM, disk_image, next_layer
from sandboxd.runtime.spec import BootImage

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from sandboxd.runtime.engine import Runtime
    from sandboxd.runtime.spec import SandboxSpec
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import SandboxRow

log = logging.getLogger("sandboxd.lifecycle.salvage")


async def salvage(runtime: Runtime, store: Store, layers: LayerStore, row: SandboxRow) -> bool:
    """Record the sandbox of `row`, which has no pause layer and whose processes are gone,
    paused to disk with its writable layer exported; or, when nothing of it is left, delete
    the record. Whether it is kept."""
    sandbox_id = row.sandbox_id
    try:
        record = await asyncio.to_thread(_export, runtime, layers, sandbox_id)
    except SandboxError as exc:
        log.warning("sandbox %s did not survive the restart: %s", sandbox_id, exc)
        record = None
    try:
        await asyncio.to_thread(runtime.remove_stopped, sandbox_id)
    except SandboxError:  # its files are in the layer now; the rest is litter
        log.exception("sandbox %s: removing what was left of it left something", sandbox_id)
    if record is None:
        await store.write(
            functools.partial(store.delete_sandbox, sandbox_id),
            functools.partial(store.add_event, now_us(), sandbox_id, "lost"),
        )
        return False
    log.warning("sandbox %s lost its processes: paused to disk with its files", sandbox_id)
    row.disk_image = record
    await lost_processes(store, row)
    return True


async def lost_processes(store: Store, row: SandboxRow) -> None:
    """Record the sandbox of `row`, its pause layer written, as paused to disk: its processes
    and its uid range are gone (a sandbox that was running paused now)."""
    row.pause_mode, row.uid_base = FILESYSTEM, None
    writes = [functools.partial(store.put_sandbox, row)]
    if row.state != "paused":
        row.state, row.end_at = "paused", now_us()
        writes.append(functools.partial(store.add_event, row.end_at, row.sandbox_id, "paused"))
    await store.write(*writes)


def _export(runtime: Runtime, layers: LayerStore, sandbox_id: str) -> dict[str, Any]:
    """The `disk_image` record of the stopped sandbox's writable layer, exported as a new pause
    layer. Blocking.

    Raises:
        SandboxError: nothing of it is left, or the export failed (no layer is left).
    """
    booted: list[SandboxSpec] = []

    def fill(dest: Path) -> None:
        booted.append(runtime.export_stopped(sandbox_id, dest))

    path, _ = layers.add(next_layer(layers, sandbox_id), fill)
    spec = booted[0]
    booted_image = BootImage(spec.layers, spec.init, spec.io_uring)
    return disk_image(booted_image, spec.limits, spec.mounts, path, layers.root)
