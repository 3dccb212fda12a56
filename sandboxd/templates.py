"""Templates: their records, ids and defaults, and the rules for changing them. A template is a
root filesystem plus its record (CPU, memory, disk size, alias). `base` is the one sandboxd
builds itself (sandboxd/host/base_image.py); until templates are built from steps, `POST
/v2/templates` makes a new record over base's root filesystem with its own CPU, memory and disk
(a `ready` build at once)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from envd.settings import ENVD_VERSION
from sandboxd.errors import NotAllowed, TemplateNotFound
from sandboxd.host.cgroups import Limits
from sandboxd.ids import new_build_id, new_template_id, now_us
from sandboxd.store import TemplateRow

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.store import Store

BASE = "base"
BASE_CPUS = 2
BASE_MEMORY_MB = 1024
BASE_DISK_MB = 10240
PIDS_LIMIT = 4096  # per sandbox: a fork bomb ends at it, the host's table does not fill


def limits(template: TemplateRow) -> Limits:
    """The cgroup limits of the template's sandboxes."""
    return Limits(template.memory_mb << 20, template.cpu_count, PIDS_LIMIT)


def register_base(store: Store, rootfs: Path, disk_mb: int) -> None:
    """Record (or update) the base template over `rootfs` with a disk of `disk_mb` (0: no
    limit). Before the event loop runs: writes at once."""
    template = store.template(BASE)
    now = now_us()
    if template is None:
        template = TemplateRow(BASE, BASE, new_build_id(), str(rootfs), BASE_CPUS,
                               BASE_MEMORY_MB, disk_mb, "ready", ENVD_VERSION, now, now)  # fmt: skip
    template.rootfs, template.envd_version = str(rootfs), ENVD_VERSION
    template.disk_size_mb = disk_mb
    store.put_template(template)


class Templates:
    """The templates of one store; `in_use(template_id)` says whether sandboxes use one."""

    def __init__(self, store: Store, in_use: Callable[[str], bool]) -> None:
        self.store = store
        self._in_use = in_use

    def all(self) -> list[TemplateRow]:
        return self.store.templates()

    def get(self, id_or_alias: str) -> TemplateRow:
        """Raises TemplateNotFound."""
        template = self.store.template(id_or_alias)
        if template is None:
            raise TemplateNotFound(id_or_alias)
        return template

    async def create_over_base(
        self, alias: str, cpu_count: int, memory_mb: int, disk_mb: int | None
    ) -> TemplateRow:
        """A template named `alias` over base's root filesystem; an alias already taken gets a
        new build of the same template, as the reference does."""
        base = self.get(BASE)
        now = now_us()
        template = self.store.template(alias)
        if template is None:
            template = TemplateRow(new_template_id(), alias, "", base.rootfs, 0, 0,
                                   base.disk_size_mb, "ready", base.envd_version, now, now,
                                   build_count=0)  # fmt: skip
        template.build_id = new_build_id()
        template.cpu_count, template.memory_mb = cpu_count, memory_mb
        if disk_mb is not None:
            template.disk_size_mb = disk_mb
        template.build_count += 1
        template.updated_at = now
        await self.store.write(functools.partial(self.store.put_template, template))
        return template

    async def set_public(self, template: TemplateRow, public: bool) -> None:
        template.public = public
        template.updated_at = now_us()
        await self.store.write(functools.partial(self.store.put_template, template))

    async def delete(self, id_or_alias: str) -> None:
        """Raises TemplateNotFound; NotAllowed for base and for a template sandboxes use."""
        template = self.get(id_or_alias)
        if template.template_id == BASE:
            raise NotAllowed("the base template cannot be deleted")
        if self._in_use(template.template_id):
            raise NotAllowed(f"template '{template.template_id}' is used by sandboxes")
        await self.store.write(functools.partial(self.store.delete_template, template.template_id))
