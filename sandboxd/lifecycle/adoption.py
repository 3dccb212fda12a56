"""Adoption: what a new sandboxd makes of what the previous one left on the host. Each record
whose sandbox survived becomes a sandbox again (in the state the record asks for), a record
whose sandbox is gone is dropped (unless it was paused to disk: it stays so), a sandbox without a record (a warm-pool leftover, a boot
that never got one) is killed, and last what of sandboxes' networks no record accounts for is
removed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.ids import now_us
from sandboxd.lifecycle.sandbox import Sandbox, ingress_of

if TYPE_CHECKING:
    from sandboxd.lifecycle.tokens import Tokens
    from sandboxd.runtime.engine import Runtime
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import SandboxRow

log = logging.getLogger("sandboxd.lifecycle.adoption")


async def adopt(runtime: Runtime, store: Store, tokens: Tokens) -> list[Sandbox]:
    """The sandboxes of the records that survived, adopted."""
    adopted: list[Sandbox] = []
    boxes = {box.id: box for box in await asyncio.to_thread(runtime.adopt)}
    for row in store.sandboxes():
        box = boxes.pop(row.sandbox_id, None)
        if row.disk_image is not None:  # paused to disk: what a restart cut short is undone
            if box is not None:
                boxes[row.sandbox_id] = box  # killed below with the leftovers
            adopted.append(_on_disk(row, tokens))
            continue
        if box is None:
            log.warning("sandbox %s did not survive the restart", row.sandbox_id)
            await store.write(
                functools.partial(store.delete_sandbox, row.sandbox_id),
                functools.partial(store.add_event, now_us(), row.sandbox_id, "lost"),
            )
            continue
        sandbox = _on_disk(row, tokens)
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
        adopted.append(sandbox)
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


def _on_disk(row: SandboxRow, tokens: Tokens) -> Sandbox:
    """The sandbox of `row`, as yet without a box."""
    token = tokens.envd(row.sandbox_id) if row.secure else None
    return Sandbox(row, None, token, ingress_of(row, tokens.traffic(row.sandbox_id)))
