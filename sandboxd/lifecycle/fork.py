"""A fork (E2B's `POST /sandboxes/{id}/fork`): a running sandbox's files captured once as a
layer, `fork-ID-N` (sandboxd.lifecycle.capture: frozen for the export and thawed at once, so it
keeps its id, endAt and processes), then `count` new sandboxes booted in parallel from its image
with that layer on top. Each child has its own id and envd token, and the parent's template,
metadata, env vars, default user and workdir, network rules, lifecycle and options (its volume
mounts among them). It cold-boots and takes /init as a create's sandbox does, so none of the
parent's processes run in it.

A child's box record holds its stack, the fork layer in it, and a pause to disk of it records
that stack (sandboxd.lifecycle.disk_pause), so it resumes and is adopted as any sandbox is; the
fork layer stays while some sandbox stacks it (sandboxd.lifecycle.made_layers)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError, WrongState
from sandboxd.host.removal import remove_tree
from sandboxd.ids import new_sandbox_id
from sandboxd.lifecycle.capture import capture
from sandboxd.lifecycle.guest_start import start_guest
from sandboxd.lifecycle.sandbox import Sandbox, ingress_of
from sandboxd.lifecycle.tokens import without_kept
from sandboxd.runtime.spec import BootImage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from sandboxd.guest.client import EnvdClient
    from sandboxd.host.cgroups import Limits
    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.tokens import Tokens
    from sandboxd.runtime.engine import Runtime
    from sandboxd.runtime.spec import VolumeMount
    from sandboxd.store.rows import SandboxRow

log = logging.getLogger("sandboxd.lifecycle.fork")

# Boots of one fork at once: more only slow each down on one host, up to envd's boot deadline.
BOOTS_AT_ONCE = 8


def layer_prefix(sandbox_id: str) -> str:
    """The start of the names of a sandbox's fork layers."""
    return f"fork-{sandbox_id}-"


@dataclass(frozen=True)
class ForkSource:
    """What a fork's children boot: the parent's record as it was at the capture, its image
    with the fork layer on top, its limits and its volume mounts (volumes are shared)."""

    parent: SandboxRow
    image: BootImage
    limits: Limits
    layer: Path
    mounts: tuple[VolumeMount, ...]


class Forks:
    """Forks for the lifecycle's manager. `in_flight`: the fork layers no child's record holds
    yet, which a kill must leave alone."""

    def __init__(self, runtime: Runtime, envd: EnvdClient, layers: LayerStore, tokens: Tokens):
        self.runtime = runtime
        self.envd = envd
        self.layers = layers
        self.tokens = tokens
        self.in_flight: set[Path] = set()

    async def capture(self, parent: Sandbox) -> ForkSource:
        """The parent's files as a new fork layer, under the parent's lock (the manager's).

        Raises:
            WrongState: the parent is paused; SandboxError: the freeze or the export failed.
        """
        if not parent.running or parent.box is None:
            raise WrongState(
                f"Sandbox '{parent.id}' is paused and cannot be forked; resume it first"
            )
        box = parent.box
        layer = await capture(
            self.runtime, self.layers, box, self.layers.next_numbered(layer_prefix(parent.id))
        )
        self.in_flight.add(layer)
        image = BootImage((*box.image.layers, layer), box.image.init, box.image.io_uring)
        return ForkSource(copy.deepcopy(parent.row), image, box.limits, layer, tuple(box.mounts))

    async def children(
        self,
        source: ForkSource,
        timeout_s: int,
        count: int,
        admit: Callable[[Sandbox, int], Awaitable[None]],
    ) -> list[Sandbox | SandboxError]:
        """`count` children of `source` booted in parallel, each handed to `admit(child,
        timeout_s)` once it took its /init; each entry the child, or why it did not start. The
        fork layer goes again when none started. Raises what is not a child's failure to start
        (a cancellation)."""
        slots = asyncio.Semaphore(BOOTS_AT_ONCE)

        async def one() -> Sandbox:
            async with slots:
                child = await self._boot(source, timeout_s)
            await admit(child, timeout_s)
            return child

        try:
            results = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        finally:
            self.in_flight.discard(source.layer)
        if not any(isinstance(r, Sandbox) for r in results):
            try:
                await asyncio.to_thread(remove_tree, source.layer)
            except SandboxError:  # no record names it: the layers' next collection takes it
                log.exception("fork of %s: removing its unused layer", source.parent.sandbox_id)
        for result in results:
            if not isinstance(result, (Sandbox, SandboxError)):
                raise result  # not a child that failed to start: the fork itself failed
        return [r for r in results if isinstance(r, (Sandbox, SandboxError))]

    async def _boot(self, source: ForkSource, timeout_s: int) -> Sandbox:
        """One child booted and /init-ed, not yet recorded.

        Raises:
            SandboxError: it did not start (nothing of it is left): BootError, InitRefused,
                TemplateError, HostError.
        """
        child_id = new_sandbox_id()
        parent = source.parent
        box = await self.runtime.boot(
            child_id, source.image, source.limits, parent.disk_size_mb, source.mounts
        )
        row = dataclasses.replace(copy.deepcopy(parent), sandbox_id=child_id, state="running",
                                  timeout_s=timeout_s, uid_base=box.uid_base, pause_mode=None,
                                  disk_image=None)  # fmt: skip
        row.options = without_kept(row.options)  # its tokens are its own
        token = self.tokens.envd(child_id) if row.secure else None
        child = Sandbox(row, box, token, ingress_of(row, self.tokens.traffic(child_id)))
        await start_guest(self.runtime, self.envd, child, box)
        return child
