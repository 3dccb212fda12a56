"""Snapshots of running sandboxes (`POST /sandboxes/{id}/snapshots`): the sandbox frozen, its
files exported as a layer (sandboxd.lifecycle.capture) and thawed at once, so that it keeps its
id, endAt, processes and state; the snapshot recorded as a build of a template
(sandboxd.templates.snapshots), which creates boot cold, as any template's sandboxes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sandboxd.errors import DiskFull, RegistryError, SandboxError, SandboxNotFound, WrongState
from sandboxd.host.removal import remove_tree
from sandboxd.lifecycle.capture import capture
from sandboxd.templates.snapshots import SnapshotRecords, parse_name

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.images.shared_layers import SharedLayers
    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Runtime
    from sandboxd.store.interface import Store
    from sandboxd.templates.snapshots import Listed


class Snapshots:
    """Snapshots for the lifecycle's manager, which takes each sandbox's lock around `take`."""

    def __init__(
        self, store: Store, runtime: Runtime, layers: LayerStore, shared: SharedLayers
    ) -> None:
        self.records = SnapshotRecords(store)
        self.runtime = runtime
        self.layers = layers
        self.shared = shared

    @staticmethod
    def check(sandbox: Sandbox) -> None:
        """Whether `sandbox` (not yet locked) can be snapshotted: running, or it will be once
        the snapshot has its lock.

        Raises:
            SandboxNotFound: it is paused (the reference's 404); WrongState: it is being paused
                or resumed (the reference's words).
        """
        if sandbox.running:
            return
        if sandbox.lock.locked():  # listed as paused from a pause's start to a resume's end
            doing = "pausing" if sandbox.row.pause_mode is None else "resuming"
            raise WrongState(
                f"Sandbox '{sandbox.id}' cannot be snapshotted while in '{doing}' state"
            )
        raise SandboxNotFound(sandbox.id)

    async def take(self, sandbox: Sandbox, name: str | None) -> Listed:
        """Snapshot `sandbox`, under its lock: recorded `building` first (the layer is kept
        from its making on), the capture, then the record made whole; a failed capture
        leaves neither layer nor record (an existing template keeps the build, failed).

        Raises:
            SandboxNotFound: it is not running (paused while this waited for the lock).
            NotAllowed: a bad `name` (`[namespace/]alias[:tag]`, the namespace the sandbox's
                team's), base's or a template's id.
            SandboxError: the freeze or the export failed (the sandbox runs on).
            RegistryError: serve's --registry did not take its layers (nor is it recorded).
        """
        if not sandbox.running:
            raise SandboxNotFound(sandbox.id)
        slug = self.records.slug(sandbox.row.team_id)
        parsed = None if name is None else parse_name(name, slug)
        box = sandbox.live()
        pending = await self.records.begin(sandbox.row, parsed)
        try:
            layer = await capture(self.runtime, self.layers, box, pending.layer_name)
            await self._push(box.image.layers, layer)
        except BaseException as exc:
            await self.records.abandon(pending, str(exc))
            if isinstance(exc, SandboxError) and not isinstance(exc, (DiskFull, RegistryError)):
                raise SandboxError(f"snapshotting {sandbox.id}: {exc}") from exc
            raise
        image = self.records.image(sandbox.row, box.image, layer, self.layers.root)
        return await self.records.finish(pending, image, sandbox.id, self.layers.root)

    async def _push(self, stack: tuple[Path, ...], layer: Path) -> None:
        """Push the snapshot's layers (serve's --registry), so that any machine creates it.

        Raises:
            RegistryError: the push failed (the snapshot's layer is removed).
        """
        try:
            await self.shared.push((*stack, layer))
        except BaseException:
            await asyncio.to_thread(remove_tree, layer)
            raise
