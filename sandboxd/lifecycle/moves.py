"""A sandbox paused to disk moving between the machines of a cluster (sandboxd.cluster.moves):
its record handed out, for another machine to resume it once this one is gone (`record`), and
such a record taken in as a paused sandbox of this machine's own (`adopt`), whose resume then
boots it like any pause to disk's, pulling the layers this machine lacks from the registry. It
keeps its id, metadata, settings, files and its envd and traffic tokens: the record carries
those its first machine derived from its secret (sandboxd.lifecycle.tokens KEPT_KEY), so that
the SDK that created it goes on with the token it holds.

A full pause cannot move (its processes and memory are its machine's), nor a sandbox mounting
volumes (they stay on their node), nor one whose layers are not shared (no registry)."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from sandboxd.errors import NotMovable, WrongState
from sandboxd.ids import now_us
from sandboxd.lifecycle.adoption import on_disk
from sandboxd.lifecycle.disk_pause import FILESYSTEM, boot_image, boot_mounts
from sandboxd.lifecycle.tokens import keeping

if TYPE_CHECKING:
    from sandboxd.images.shared_layers import SharedLayers
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.lifecycle.tokens import Tokens
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import SandboxRow


class Moves:
    """For the lifecycle's manager, over its sandboxes (`sandboxes`, by id)."""

    def __init__(self, store: Store, sandboxes: dict[str, Sandbox], tokens: Tokens,
                 shared: SharedLayers) -> None:  # fmt: skip
        self.store = store
        self.sandboxes = sandboxes
        self.tokens = tokens
        self.shared = shared

    async def record(self, sandbox: Sandbox) -> SandboxRow:
        """A copy of the record of `sandbox`, paused to disk, for another machine, with its tokens.

        Raises:
            NotMovable: it is not paused to disk, it mounts volumes, or this machine pushes its
                layers to no registry.
        """
        async with sandbox.lock:  # not while a resume or pause changes it
            row = sandbox.row
            if row.state != "paused" or row.pause_mode != FILESYSTEM or row.disk_image is None:
                how = "paused with its memory" if row.state == "paused" else row.state
                raise NotMovable(f"sandbox {row.sandbox_id} is {how}, not paused to disk: "
                                 "only its own node can resume it")  # fmt: skip
            if self.shared.registry is None:
                raise NotMovable(f"sandbox {row.sandbox_id} is paused on a node that shares no "
                                 "registry (--registry): only its own node can resume it")  # fmt: skip
            if boot_mounts(row.disk_image):
                raise NotMovable(f"sandbox {row.sandbox_id} mounts volumes, which stay on their "
                                 "node: only its own node can resume it")  # fmt: skip
            envd, traffic = self.tokens.of(row)
            return dataclasses.replace(
                row, uid_base=None, options=keeping(row.options, envd, traffic)
            )

    async def adopt(self, record: SandboxRow) -> Sandbox:
        """The sandbox of `record` (a disk-paused sandbox's, from another machine), recorded
        as paused to disk here; its resume boots it.

        Raises:
            NotMovable: the record is not one of a sandbox paused to disk.
            SandboxError: the record's image is unreadable.
            WrongState: this machine has a sandbox of that id (a stale copy not yet dropped).
        """
        if record.state != "paused" or record.pause_mode != FILESYSTEM:
            raise NotMovable(f"sandbox {record.sandbox_id}: only a record of a sandbox paused "
                             "to disk can move")  # fmt: skip
        boot_image(record.disk_image, self.shared.layers.root)
        if record.sandbox_id in self.sandboxes:
            raise WrongState(f"this node has a sandbox {record.sandbox_id} already")
        # Adopted now: the cluster's reconciliation spares a sandbox this young while the
        # catalog is moved to this node (its resume sets the time again).
        row = dataclasses.replace(record, uid_base=None, started_at=now_us())
        sandbox = on_disk(row, self.tokens)
        self.sandboxes[row.sandbox_id] = sandbox
        try:
            await self.store.write(functools.partial(self.store.put_sandbox, row))
        except BaseException:
            self.sandboxes.pop(row.sandbox_id, None)
            raise
        return sandbox
