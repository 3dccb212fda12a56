"""A sandbox's files captured as a layer of the layer store: its writable layer exported while
it is frozen, so that the layer is one instant of it. A pause to disk keeps it frozen after
(sandboxd.lifecycle.disk_pause); a snapshot or a fork thaws it at once and it runs on."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from typing import TYPE_CHECKING

from sandboxd.errors import DiskFull, SandboxError
from sandboxd.host.removal import remove_tree

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from sandboxd.runtime.engine import Box, Runtime


def export_layer(runtime: Runtime, layers: LayerStore, box: Box, name: str) -> Path:
    """Layer `name` made from the writable layer of `box` (which must not write meanwhile: it
    is frozen), within the layer store's quota. Blocking.

    Raises:
        DiskFull: the state disk filled up, or the layer passed the quota (it is removed).
        SandboxError: the export failed (no layer of that name is left).
    """

    def fill(dest: Path) -> None:
        runtime.export_diff(box, dest)

    remove_tree(layers.path(name))  # an export a restart cut short: never recorded
    try:
        path, _ = layers.add(name, fill)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise DiskFull(f"sandbox {box.id}: the state disk is full (layer {name})") from exc
    if layers.quota is not None:
        try:
            layers.quota.check_layer(f"sandbox {box.id}'s layer {name}")
        except DiskFull:
            remove_tree(path)
            raise
    return path


async def capture(runtime: Runtime, layers: LayerStore, box: Box, name: str) -> Path:
    """Freeze `box`, export it as layer `name`, and thaw it unless it was frozen already: the
    sandbox runs on as before, whatever happened.

    Raises:
        SandboxError: the freeze or the export failed.
    """
    frozen = box.frozen
    await runtime.freeze(box)
    try:
        return await asyncio.to_thread(export_layer, runtime, layers, box, name)
    finally:
        if not frozen:
            with contextlib.suppress(SandboxError):
                await runtime.thaw(box)
