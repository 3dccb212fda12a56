"""Adoption: what a new sandboxd makes of what the previous one left on the host. Each record
whose sandbox survived becomes a sandbox again (in the state the record asks for). A record
whose sandbox lost its processes (serve and its sandboxes killed, a crash, a reboot) keeps its
files: paused to disk, from the pause layer its full pause wrote, or, for one that was running,
from its writable layer exported now (sandboxd.lifecycle.salvage); only a sandbox of which
nothing is left is dropped. A sandbox without a record (a warm-pool leftover, a boot that never
got one) is killed, and last what of sandboxes' networks no record accounts for is removed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.lifecycle.disk_pause import FULL
from sandboxd.lifecycle.salvage import lost_processes, salvage
from sandboxd.lifecycle.sandbox import Sandbox, ingress_of

if TYPE_CHECKING:
    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.tokens import Tokens
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import SandboxRow

log = logging.getLogger("sandboxd.lifecycle.adoption")


async def adopt(
    runtime: Runtime, store: Store, tokens: Tokens, layers: LayerStore
) -> list[Sandbox]:
    """The sandboxes of the records, adopted: running or frozen as before, or paused to disk."""
    adopted: list[Sandbox] = []
    rows = store.sandboxes()
    unwritten = {row.sandbox_id for row in rows if row.disk_image is None}
    boxes = {box.id: box for box in await asyncio.to_thread(runtime.adopt, unwritten)}
    for row in rows:
        box = boxes.pop(row.sandbox_id, None)
        if box is not None and (row.disk_image is None or row.pause_mode == FULL):
            adopted.append(await _alive(runtime, store, tokens, row, box))
            continue
        if box is not None:  # a pause to disk a restart cut short: undone below
            boxes[row.sandbox_id] = box
        elif row.disk_image is None:  # its files exported now, or nothing of it is left
            if not await salvage(runtime, store, layers, row):
                continue
        elif row.pause_mode == FULL:
            await lost_processes(store, row)
        adopted.append(on_disk(row, tokens))
    for box in boxes.values():  # warm-pool leftovers and boots that never got a record
        log.info("sandbox %s has no record: killing it", box.id)
        try:
            await runtime.kill(box)
        except SandboxError:  # one stuck leftover must not keep sandboxd from serving
            log.exception("sandbox %s: removing the leftover left something", box.id)
    try:
        await asyncio.to_thread(runtime.sweep_network)
    except SandboxError:  # nor must an orphan that will not go
        log.exception("removing orphaned sandbox networks left something")
    return adopted


async def _alive(
    runtime: Runtime, store: Store, tokens: Tokens, row: SandboxRow, box: Box
) -> Sandbox:
    """The sandbox of `row` whose `box` survived, frozen or running as its record says."""
    sandbox = on_disk(row, tokens)
    sandbox.box = box
    if row.uid_base != box.uid_base:  # the record on the host is the truth
        row.uid_base = box.uid_base
        await store.write(functools.partial(store.put_sandbox, row))
    # A restart in the middle of a pause or resume: the record says what was asked.
    with contextlib.suppress(SandboxError):
        if row.state == "paused" and not box.frozen:
            await runtime.freeze(box)
        elif row.state == "running" and box.frozen:
            await runtime.thaw(box)
    return sandbox


def on_disk(row: SandboxRow, tokens: Tokens) -> Sandbox:
    """The sandbox of `row`, as yet without a box."""
    envd, traffic = tokens.of(row)
    return Sandbox(row, None, envd, ingress_of(row, traffic))
