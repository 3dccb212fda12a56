"""A sandbox paused to disk resumed on another node once its own is gone. The catalog keeps,
beside what is shown of a sandbox, its node's record of it while it is paused to disk
(sandboxd.node.service PausedMoves.paused_record; its layers are in the registry its node pushes
them to). A resume or connect through a gateway of such a sandbox whose node's lease expired
places it on a live node (sandboxd.cluster.placement), hands that node the record
(adopt_paused: the node's own paused sandbox from then on, its resume a boot that pulls the
layers the node lacks) and moves the catalog's entry there; one gateway at a time moves a
sandbox (the database's `move-ID` lease). A sandbox that was running when its node was lost
stays lost (NodeLost); one paused with its memory, or without a record, cannot move
(NotMovable).

The catalog's view follows each pause, resume and connect through a gateway (`note`), and what
a node did by itself (a pause at the sandbox's end, a wake by its traffic) at the gateways'
next reconciliation (sandboxd.cluster.reconcile)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

from sandboxd.cluster import placement
from sandboxd.errors import (
    NodeLost,
    NoNodeAvailable,
    NotMovable,
    SandboxNotFound,
    StoreUnavailable,
    WrongState,
)
from sandboxd.ids import now_us
from sandboxd.lifecycle.disk_pause import FILESYSTEM, FULL
from sandboxd.node.models import recorded
from sandboxd.store.rows import SandboxRow

if TYPE_CHECKING:
    from sandboxd.cluster.nodes import ClusterNodes
    from sandboxd.node.models import SandboxInfo
    from sandboxd.store.rows import CatalogRow, NodeRow

log = logging.getLogger("sandboxd.cluster.moves")

MOVE_LEASE_S: Final = 60.0  # the longest one gateway holds a sandbox's move


class CatalogMoves:
    def __init__(self, nodes: ClusterNodes) -> None:
        self.nodes = nodes
        self.store = nodes.store
        self.holder = secrets.token_hex(8)

    async def note(self, entry: CatalogRow, node: NodeRow, info: SandboxInfo) -> None:
        """Record in the catalog that the sandbox of `entry` is as `info` shows it on `node`:
        with its record (asked of the node) when it is paused to disk, without otherwise.
        Written only when it changed node or state, or started again (its pause layers are
        others then).

        Raises:
            StoreUnavailable: the database is away; SandboxError: the node did not answer.
        """
        shown = tuple(entry.info.get(k) for k in ("state", "pause_mode", "started_at"))
        if (entry.node_id, shown) == (node.node_id, (*_state(info), info.started_at)):
            return
        record, unmovable = None, None
        if _state(info) == ("paused", FILESYSTEM):
            record, unmovable = await self._record(node, info)
        noted = dataclasses.replace(entry, node_id=node.node_id, info=recorded(info),
                                    record=record, unmovable=unmovable)  # fmt: skip
        await self.store.write(functools.partial(self.store.update_catalog_entry, noted))

    async def _record(
        self, node: NodeRow, info: SandboxInfo
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The node's record of its sandbox paused to disk, or why it cannot move."""
        try:
            row = await self.nodes.client(node).paused_record(info.sandbox_id)
        except NotMovable as exc:
            log.warning("%s", exc)
            return None, str(exc)
        return dataclasses.asdict(row), None

    async def move(self, entry: CatalogRow) -> NodeRow:
        """The live node the sandbox of `entry`, paused to disk on a node whose lease expired,
        is moved to (or was, by another gateway meanwhile).

        Raises:
            NodeLost: it was not paused when its node was lost.
            NotMovable: paused with its memory, or its record could not be kept.
            WrongState: another gateway is moving it.
            NoNodeAvailable: no live node took it.
            SandboxNotFound: it was killed meanwhile. StoreUnavailable.
        """
        record = movable(entry)
        lease = await self._claim(entry.sandbox_id)
        try:
            return await self._moved(entry, record)
        finally:  # one left (the database away, the gateway dead) the reconciliation drops
            with contextlib.suppress(StoreUnavailable):
                await self.store.write(
                    functools.partial(self.store.release_lock, lease, self.holder)
                )

    async def _moved(self, entry: CatalogRow, record: SandboxRow) -> NodeRow:
        current = self.store.catalog_entry(entry.sandbox_id)
        if current is None:
            raise SandboxNotFound(entry.sandbox_id)
        there = self.store.node(current.node_id)
        if current.node_id != entry.node_id and there and placement.alive(there, now_us()):
            return there  # moved by another gateway since `entry` was read
        node, info = await self._adopted(current, record)
        moved = dataclasses.replace(current, node_id=node.node_id, info=recorded(info))
        await self.store.write(functools.partial(self.store.update_catalog_entry, moved))
        log.info("sandbox %s moved from node %s to node %s", entry.sandbox_id,
                 entry.node_id, node.node_id)  # fmt: skip
        return node

    async def _claim(self, sandbox_id: str) -> str:
        """Hold the sandbox's move lease; its name. Raises WrongState: another gateway holds
        it."""
        name, now = f"move-{sandbox_id}", now_us()
        until = now + int(MOVE_LEASE_S * 1e6)
        await self.store.write(
            functools.partial(self.store.take_lock, name, self.holder, now, until)
        )
        if self.store.lock_holder(name, now) != self.holder:
            raise WrongState(f"sandbox {sandbox_id} is being moved to another node by another "
                             "gateway: try again")  # fmt: skip
        return name

    async def _adopted(self, entry: CatalogRow, record: SandboxRow) -> tuple[NodeRow, SandboxInfo]:
        """The live node that took the record, each refusing one left out, and its answer.

        Raises:
            NotMovable: the record is not one a node takes; NoNodeAvailable.
        """
        refusals = {entry.node_id: "its lease expired"}
        while True:
            node = placement.choose(self.store.nodes(), record.template_id, record.cpu_count,
                                    now_us(), refusals, self.nodes.reserved)  # fmt: skip
            if node is None:
                raise NoNodeAvailable(placement.no_node(refusals))
            try:
                return node, await self.nodes.client(node).adopt_paused(record)
            except NotMovable:
                raise
            except Exception as exc:  # noqa: BLE001  # refused or unreachable: another node
                log.info("node %s refused sandbox %s: %s", node.node_id, entry.sandbox_id, exc)
                refusals[node.node_id] = str(exc) or type(exc).__name__


def movable(entry: CatalogRow) -> SandboxRow:
    """The record the sandbox of `entry` moves with.

    Raises:
        NodeLost: it was not paused when its node was lost; NotMovable: no record of it.
    """
    if entry.record is not None:
        return SandboxRow(**entry.record)
    state = entry.info.get("state"), entry.info.get("pause_mode")
    where = f"on node {entry.node_id}, whose lease expired"
    if state == ("paused", FULL):
        raise NotMovable(f"sandbox {entry.sandbox_id} is paused with its memory {where}: only "
                         "that node can resume it (a pause to disk can move)")  # fmt: skip
    if state == ("paused", FILESYSTEM):
        why = entry.unmovable or "no record of it another node can resume it from"
        raise NotMovable(f"sandbox {entry.sandbox_id} is paused to disk {where}: {why}")
    raise NodeLost(entry.sandbox_id, entry.node_id)


def _state(info: SandboxInfo) -> tuple[str, str | None]:
    return info.state, info.pause_mode
