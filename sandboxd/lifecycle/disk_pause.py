"""A pause to disk (E2B's filesystem-only pause, `{"memory": false}`): the sandbox's writable
layer kept as a layer of the layer store (`pause-ID-N`), everything else of it released (its
processes and memory, network slot, uid range, loop device); its resume boots the same image
with that layer on top and the same volumes mounted, under the same id, and sends envd's /init
again (the same env vars, user, workdir and token: the token derives from the id). Its record says what it boots
(`SandboxRow.disk_image`), so that a restarted serve resumes it too. A full pause's connect with
`memory: false` goes the same way: killed and booted from the layer the full pause wrote.

Each function runs under the sandbox's lock (sandboxd.lifecycle.manager)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxError
from sandboxd.host.cgroups import Limits
from sandboxd.host.removal import remove_tree
from sandboxd.ids import now_us
from sandboxd.layers.portable import recorded, resolved
from sandboxd.lifecycle.capture import export_layer
from sandboxd.lifecycle.guest_start import start_guest
from sandboxd.runtime.spec import INITS, BootImage, VolumeMount

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandboxd.guest.client import EnvdClient
    from sandboxd.images.shared_layers import SharedLayers
    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.lifecycle.disk_pause")

FULL = "full"  # `pauseMode`: frozen, processes and memory kept
FILESYSTEM = "filesystem"  # on disk: files kept, the resume a boot


def layer_prefix(sandbox_id: str) -> str:
    """The start of the names of a sandbox's pause layers."""
    return f"pause-{sandbox_id}-"


def next_layer(layers: LayerStore, sandbox_id: str) -> str:
    """The name of a new pause layer of a sandbox: numbered past those of it in the store."""
    return layers.next_numbered(layer_prefix(sandbox_id))


def disk_image(
    image: BootImage, limits: Limits, mounts: Sequence[VolumeMount], layer: Path, root: Path
) -> dict[str, Any]:
    """What the record keeps of a sandbox paused to disk: its image with `layer` on top (their
    paths portable from the state directory `root`), its limits, its volume mounts."""
    return {
        "layers": [recorded(p, root) for p in (*image.layers, layer)],
        "init": image.init,
        "io_uring": image.io_uring,
        "limits": dataclasses.asdict(limits),
        "mounts": [[str(m.host_dir), m.path_inside] for m in mounts],
    }


def boot_image(record: dict[str, Any] | None, root: Path) -> tuple[BootImage, Limits]:
    """The image and limits a `disk_image` record boots on the machine whose state directory
    is `root`.

    Raises:
        SandboxError: there is no record, or it is not one.
    """
    if record is None:
        raise SandboxError("the sandbox is not paused to disk")
    try:
        init = record["init"]
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}")
        layers = tuple(resolved(p, root) for p in record["layers"])
        return BootImage(layers, init, record["io_uring"] is True), Limits(**record["limits"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SandboxError(f"the record of the paused sandbox is unreadable: {exc}") from exc


def boot_mounts(record: dict[str, Any] | None) -> tuple[VolumeMount, ...]:
    """The volume mounts a `disk_image` record boots with (none in one from before them, or
    in no record)."""
    mounts = (record or {}).get("mounts") or []
    return tuple(VolumeMount(Path(host), str(inside)) for host, inside in mounts)


class DiskPauses:
    """Pauses to disk and the boots that resume them, for the lifecycle's manager."""

    def __init__(self, store: Store, runtime: Runtime, envd: EnvdClient, layers: LayerStore,
                 shared: SharedLayers) -> None:  # fmt: skip
        self.store = store
        self.runtime = runtime
        self.envd = envd
        self.layers = layers
        self.shared = shared

    async def pause(self, sandbox: Sandbox) -> None:
        """Export the frozen (or running) sandbox's writable layer (unless its full pause
        wrote it: frozen since), record it, then remove the sandbox from the host. On an error
        before the record it stays as it was.

        Raises:
            SandboxError: the freeze or the export failed.
        """
        box = sandbox.live()
        row = sandbox.row
        if row.disk_image is None or not box.frozen:
            layer = await self.export_frozen(box)
            await self._push(box, layer)
            row.disk_image = disk_image(box.image, box.limits, box.mounts, layer, self.layers.root)
        row.state, row.pause_mode, row.uid_base = "paused", FILESYSTEM, None  # its range goes
        row.end_at = now_us()
        await self.store.write(
            functools.partial(self.store.put_sandbox, row),
            functools.partial(self.store.add_event, row.end_at, sandbox.id, "paused"),
        )
        sandbox.box = None
        await self.envd.forget(sandbox.id)
        try:
            await self.runtime.kill(box)
        except SandboxError:  # paused as recorded; a restart's adoption removes what is left
            log.exception("sandbox %s: removing it after its pause left something", box.id)

    async def export_frozen(self, box: Box) -> Path:
        """Freeze `box` and export its writable layer as a new pause layer; it stays frozen.
        On an error it runs again if it ran before.

        Raises:
            SandboxError: the freeze or the export failed.
        """
        frozen = box.frozen
        await self.runtime.freeze(box)
        try:
            name = next_layer(self.layers, box.id)
            return await asyncio.to_thread(export_layer, self.runtime, self.layers, box, name)
        except BaseException:
            if not frozen:  # running again, as before the pause
                with contextlib.suppress(SandboxError):
                    await self.runtime.thaw(box)
            raise

    async def _push(self, box: Box, layer: Path) -> None:
        """Push the sandbox's stack and its new pause layer (serve's --registry), so that
        another machine can resume it; a failed push fails the pause, which runs on.

        Raises:
            RegistryError: the push failed (the layer is removed, the sandbox thawed).
        """
        try:
            await self.shared.push((*box.image.layers, layer))
        except BaseException:
            await asyncio.to_thread(remove_tree, layer)
            with contextlib.suppress(SandboxError):
                await self.runtime.thaw(box)
            raise

    async def reboot(self, sandbox: Sandbox) -> None:
        """A paused sandbox booted from its files, paused to disk first if it is frozen.
        Raises SandboxError as `pause` and `boot`."""
        if sandbox.box is not None:
            await self.pause(sandbox)
        await self.boot(sandbox)

    async def boot(self, sandbox: Sandbox) -> None:
        """Boot a sandbox paused to disk from its record, under its own id, and /init it; on
        failure nothing of the boot is left and it stays paused.

        Raises:
            SandboxError: the boot or /init failed (BootError, InitRefused, TemplateError).
        """
        image, limits = boot_image(sandbox.row.disk_image, self.layers.root)
        mounts = boot_mounts(sandbox.row.disk_image)
        await self.shared.fetch(image.layers)  # paused on another machine, or removed here
        box = await self.runtime.boot(sandbox.id, image, limits, sandbox.row.disk_size_mb, mounts)
        await start_guest(self.runtime, self.envd, sandbox, box)
        sandbox.box = box
        sandbox.row.uid_base = box.uid_base

    def drop_written(self, record: dict[str, Any]) -> None:
        """Delete the pause layer a full pause wrote (the top of its `disk_image` record) once
        the sandbox runs again: its files are the running sandbox's now. Blocking; a layer that
        will not go is left to layer collection (nothing records it any more)."""
        try:
            remove_tree(resolved(record["layers"][-1], self.layers.root))
        except SandboxError:
            log.exception("removing the pause layer of a thawed sandbox left something")
