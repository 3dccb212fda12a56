"""Sandboxes of a template's image, ready to hand out: booted, and with the template's start
command running and its ready command passed (as E2B's snapshot of a template is taken with
them done). From the warm pool when it holds one, which fills itself through the same boot, so
a pooled create stays an /init away even for a template with a slow start command; one with
volumes to mount is booted with them (a pooled sandbox has none)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandboxd.errors import BootError, SandboxError, StoreUnavailable
from sandboxd.guest.client import EnvdUnreachable
from sandboxd.guest.start_cmd import start_and_wait
from sandboxd.ids import new_sandbox_id
from sandboxd.lifecycle.pool import WarmPool
from sandboxd.templates import catalog

if TYPE_CHECKING:
    from sandboxd.guest.client import EnvdClient
    from sandboxd.host.cgroups import Limits
    from sandboxd.images.shared_layers import SharedLayers
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.runtime.spec import VolumeMount
    from sandboxd.templates.catalog import Templates
    from sandboxd.templates.image import TemplateImage

log = logging.getLogger("sandboxd.lifecycle.template_boxes")


class TemplateBoxes:
    def __init__(
        self, runtime: Runtime, envd: EnvdClient, pool_size: int, shared: SharedLayers
    ) -> None:
        self.runtime = runtime
        self._shared = shared
        self._envd = envd
        self.pool = WarmPool(runtime, pool_size, self.boot)

    async def take(
        self, image: TemplateImage, limits: Limits, disk_mb: int, mounts: tuple[VolumeMount, ...]
    ) -> Box:
        """A ready sandbox of `image` with `mounts`: a pooled one (none), or one booted now.

        Raises:
            TemplateError: the image cannot boot; BootError: it did not come up, or its start
                command did not get ready (nothing of the sandbox is left).
        """
        box = None if mounts else await self.pool.take(image, limits, disk_mb)
        return box if box is not None else await self.boot(image, limits, disk_mb, mounts)

    def fill_every(self, templates: Templates) -> None:
        """Keep sandboxes of every template that has something to boot warm (none while a node
        agent's shared database, where the templates are, is away)."""
        try:
            rows = templates.all()
        except StoreUnavailable:
            log.warning("the templates' records are away: no sandbox is kept warm yet")
            return
        for template in rows:
            try:
                _, image = templates.resolve(template.template_id)
            except SandboxError:  # nothing to boot yet (never built): nothing to keep warm
                continue
            self.fill(image, catalog.limits(template), template.disk_size_mb)

    def fill(self, image: TemplateImage, limits: Limits, disk_mb: int) -> None:
        self.pool.fill(image, limits, disk_mb)

    async def boot(
        self,
        image: TemplateImage,
        limits: Limits,
        disk_mb: int,
        mounts: tuple[VolumeMount, ...] = (),
    ) -> Box:
        """Boot a sandbox of `image` with `mounts` (its layers pulled first where the layer
        store lacks them) and run its start and ready commands.

        Raises:
            RegistryError, ImageError: a missing layer could not be pulled; as `take`.
        """
        await self._shared.fetch(image.layer_paths)
        box = await self.runtime.boot(new_sandbox_id(), image.boot_image, limits, disk_mb, mounts)
        if not (image.start_cmd or image.ready_cmd):
            return box
        try:
            async with self._envd.reaching(box.id, box.dialer):
                await start_and_wait(self._envd, box.id, image.start_command, image.ready_command)
        except (SandboxError, EnvdUnreachable) as exc:
            try:
                await self.runtime.kill(box)
            except SandboxError:
                log.exception("sandbox %s: killing it after its start command failed", box.id)
            raise BootError(f"sandbox {box.id}: the template's start command: {exc}") from exc
        return box

    async def close(self) -> None:
        await self.pool.close()
