"""The gateways' reconciliation, done by one of them at a time (the holder of the database's
`reconcile` lease, sandboxd.store.interface Catalog.take_lock): every INTERVAL_S, on every live
node, a sandbox the catalog does not know and older than a create's deadline is an orphan (made
for an older gateway that died before recording it: nodes record creates themselves now,
sandboxd.node.catalog_record; or killed through the catalog while its node was away) and is
killed; a catalog row whose sandbox its live node no longer has (it ended at its timeout there;
the node is asked again first, and shows a create still starting) is dropped; a sandbox the
catalog has on another live node is a copy left behind by a move (sandboxd.cluster.moves) and
is dropped at once; what a node did by itself to a
sandbox (paused it at its end, woke it) is noted in the catalog; a volume on a live node that
the shared database has no record of and older than a create's deadline is an orphan too (its
create's gateway died between the node's create and the record) and is deleted; an unfinished
build whose node's lease expired ends in error (sandboxd.cluster.builds); and the leases that
ran out (a move's whose gateway died holding it) are forgotten."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from typing import TYPE_CHECKING, Final

from sandboxd.cluster import placement
from sandboxd.cluster.nodes import CREATE_DEADLINE_S
from sandboxd.errors import SandboxError, SandboxNotFound, VolumeNotFound, WrongState
from sandboxd.ids import now_us

if TYPE_CHECKING:
    from sandboxd.cluster.builds import ClusterBuilds
    from sandboxd.cluster.nodes import ClusterNodes
    from sandboxd.node.models import SandboxInfo
    from sandboxd.store.rows import NodeRow

log = logging.getLogger("sandboxd.cluster.reconcile")

LOCK: Final = "reconcile"
INTERVAL_S: Final = 2.0


class Reconciler:
    def __init__(self, nodes: ClusterNodes, builds: ClusterBuilds,
                 grace_s: float = CREATE_DEADLINE_S, interval_s: float = INTERVAL_S) -> None:  # fmt: skip
        self.nodes = nodes
        self.builds = builds
        self.grace_us = int(grace_s * 1e6)
        self.interval_s = interval_s
        self.holder = secrets.token_hex(8)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                if await self._hold():
                    await self.once()
            except SandboxError as exc:  # the database or a node away: the next round tries
                log.warning("reconciliation: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def _hold(self) -> bool:
        store = self.nodes.store
        now = now_us()
        until = now + int(3 * self.interval_s * 1e6)
        await store.write(functools.partial(store.take_lock, LOCK, self.holder, now, until))
        return store.lock_holder(LOCK, now) == self.holder

    async def once(self) -> None:
        """One round over the live nodes, and the builds of lost ones."""
        store = self.nodes.store
        now = now_us()
        for node in store.nodes():
            if placement.alive(node, now):
                await self._node(node, now)
                await self._volumes(node, now)
        await self.builds.fail_lost()
        await store.write(functools.partial(store.drop_expired_locks, now))

    async def _node(self, node: NodeRow, now: int) -> None:
        store = self.nodes.store
        try:
            running = await self.nodes.client(node).list_sandboxes()
        except Exception as exc:  # noqa: BLE001  # unreachable: its lease will tell
            log.info("reconciliation: node %s did not list: %s", node.node_id, exc)
            return
        known = {e.sandbox_id: e for e in store.node_catalog(node.node_id)}
        held = {s.sandbox_id for s in running}
        for sandbox in running:
            entry = known.get(sandbox.sandbox_id)
            if entry is None:
                await self._unrecorded(node, sandbox, now)
            else:  # what the node did by itself: a pause at its end, a wake by its traffic
                await self.nodes.noted(entry, node, sandbox)
        for sandbox_id in known.keys() - held:
            if store.catalog_entry(sandbox_id) is not None and not await self._on(node, sandbox_id):
                await store.write(functools.partial(store.delete_catalog_entry, sandbox_id))

    async def _on(self, node: NodeRow, sandbox_id: str) -> bool:
        """Whether the node still has the sandbox (asked again: it may have been made since)."""
        return await self.nodes.client(node).get(sandbox_id) is not None

    async def _unrecorded(self, node: NodeRow, sandbox: SandboxInfo, now: int) -> None:
        """Kill a sandbox the catalog does not have on `node`: at once when it has it on
        another live node (a stale copy of a sandbox moved while this node was away,
        sandboxd.cluster.moves: its node's own files, the registry's layers untouched), else
        once it is older than a create's deadline (or a move's: the catalog follows it)."""
        entry = self.nodes.store.catalog_entry(sandbox.sandbox_id)
        if entry is not None and entry.node_id == node.node_id:
            return  # recorded since the list
        owner = None if entry is None else self.nodes.store.node(entry.node_id)
        if owner is not None and placement.alive(owner, now):
            log.warning("dropping sandbox %s on node %s: it moved to node %s",
                        sandbox.sandbox_id, node.node_id, owner.node_id)  # fmt: skip
        elif now - sandbox.started_at > self.grace_us:
            log.warning("reaping sandbox %s on node %s: no gateway recorded it",
                        sandbox.sandbox_id, node.node_id)  # fmt: skip
        else:
            return
        with contextlib.suppress(SandboxNotFound):
            await self.nodes.client(node).kill(sandbox.sandbox_id)

    async def _volumes(self, node: NodeRow, now: int) -> None:
        """Delete the node's volumes older than a create's deadline that the shared database
        has no record of (a create records its volume within that time, or deletes it again)."""
        client = self.nodes.client(node)
        try:
            held = await client.list_volumes()
        except Exception as exc:  # noqa: BLE001  # unreachable: its lease will tell
            log.info("reconciliation: node %s did not list its volumes: %s", node.node_id, exc)
            return
        old = [v for v in held if now - v.created_at > self.grace_us]
        if not old:
            return
        store = self.nodes.store
        recorded = {v.volume_id for v in store.volumes()}
        for volume in old:
            if volume.volume_id in recorded:
                continue
            log.warning("reaping volume %s (%s) on node %s: no gateway recorded it",
                        volume.volume_id, volume.name, node.node_id)  # fmt: skip
            try:
                await client.delete_volume(volume.volume_id)
            except VolumeNotFound:
                pass
            except WrongState as exc:  # a sandbox there mounts it by name: tried next round
                log.info("reconciliation: volume %s stays for now: %s", volume.volume_id, exc)
