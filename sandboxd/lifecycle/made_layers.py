"""The layers sandboxes make of their files: a pause to disk's `pause-ID-N`
(sandboxd.lifecycle.disk_pause) and a fork's `fork-ID-N` (sandboxd.lifecycle.fork). Other
sandboxes stack them too (a fork's children stack its layer, and the pause layers their parent
booted from), so a kill removes those the killed sandbox made or stacked only once no sandbox
and no template's build stacks them. The layer store's collection (sandboxd.layers.collect)
keeps them by the same records: a box's, or the row of a sandbox paused to disk."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sandboxd.host.removal import remove_tree
from sandboxd.layers.portable import resolved

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.sandbox import Sandbox

MADE = ("pause-", "fork-")


def stack(sandbox: Sandbox, root: Path) -> tuple[Path, ...]:
    """The layers a sandbox stacks, as its records say: its box's, or what its resume from a
    pause to disk boots (on the machine whose state directory is `root`)."""
    if sandbox.box is not None:
        return sandbox.box.image.layers
    if sandbox.row.disk_image is not None:
        return tuple(resolved(p, root) for p in sandbox.row.disk_image["layers"])
    return ()


def _remove_unused(
    layers: LayerStore, gone: str, stacked: Iterable[Path], used: Iterable[Path]
) -> None:
    owned = tuple(f"{prefix}{gone}-" for prefix in MADE)
    candidates = {p.name for p in stacked}
    kept = {p.name for p in used}
    for layer in layers.layers():
        name = layer.name
        ours = name in candidates or name.startswith(owned)
        if name.startswith(MADE) and ours and name not in kept:
            remove_tree(layer)


async def release(
    layers: LayerStore, gone: Sandbox, others: Iterable[Sandbox], kept: Iterable[Path]
) -> None:
    """Remove the layers `gone` made or stacked that neither `others` (the sandboxes left) stack
    nor `kept` holds (the templates' builds, forks being booted).

    Raises:
        TeardownError: a layer would not go.
    """
    used = [*(p for sandbox in others for p in stack(sandbox, layers.root)), *kept]
    await asyncio.to_thread(_remove_unused, layers, gone.id, stack(gone, layers.root), used)
