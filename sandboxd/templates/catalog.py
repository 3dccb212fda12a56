"""Templates: their records, ids, names and tags, and the rules for changing them. A template
is a record (CPU, memory, disk size, name) and its builds (sandboxd.builds); each tag points at
a build, whose image (sandboxd.templates.image) its sandboxes boot; a bare name means the
`default` tag. `base` is the one sandboxd makes itself (sandboxd/builds/base_image.py), one root
filesystem without builds; so are the records `POST /v2/templates` makes over base's root
filesystem (the seed's call, which no SDK makes: a `ready` build at once)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from envd.settings import ENVD_VERSION
from sandboxd.errors import NotAllowed, NotFound, TemplateNotFound
from sandboxd.host.cgroups import Limits
from sandboxd.ids import new_build_id, new_template_id, now_us
from sandboxd.layers.portable import recorded
from sandboxd.store.rows import DEFAULT_TEAM_ID, BuildRow, TemplateRow
from sandboxd.templates.image import TemplateImage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.store.interface import Store

BASE = "base"
BASE_CPUS = 2
BASE_MEMORY_MB = 1024
BASE_DISK_MB = 10240
PIDS_LIMIT = 4096  # per sandbox: a fork bomb ends at it, the host's table does not fill
DEFAULT_TAG = "default"
# E2B's names: lower-case letters, digits, `-` and `_` (and `.` in tags), `name:tag`.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}$")
TAG = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$")


def split_ref(ref: str) -> tuple[str, str | None]:
    """`name:tag` as (name, tag); a bare name or id as (it, None)."""
    name, colon, tag = ref.rpartition(":")
    return (name, tag) if colon and name else (ref, None)


def check_name(name: str) -> None:
    """Raises NotAllowed for a name E2B would refuse."""
    if not NAME.match(name):
        raise NotAllowed(f"template name {name!r}: lower-case letters, digits, - and _")


def check_tag(tag: str) -> None:
    if not TAG.match(tag):
        raise NotAllowed(f"tag {tag!r}: letters, digits, '.', '-' and '_', at most 128")


def limits(template: TemplateRow) -> Limits:
    """The cgroup limits of the template's sandboxes."""
    return Limits(template.memory_mb << 20, template.cpu_count, PIDS_LIMIT)


def register_base(store: Store, rootfs: Path, disk_mb: int, root: Path) -> None:
    """Record (or update) the base template over `rootfs` with a disk of `disk_mb` (0: no
    limit), public: every team boots it; `rootfs` kept relative to the state directory `root`
    when in it (every node of a cluster has its own there). Before the event loop runs: writes
    at once."""
    template = store.template(BASE)
    now = now_us()
    kept = recorded(rootfs, root)
    if template is None:
        template = TemplateRow(BASE, BASE, new_build_id(), kept, BASE_CPUS,
                               BASE_MEMORY_MB, disk_mb, "ready", ENVD_VERSION, now, now)  # fmt: skip
    template.rootfs, template.envd_version = kept, ENVD_VERSION
    template.public = True  # every team's creates boot it
    template.disk_size_mb = disk_mb
    store.put_template(template)


def tagged_layers(store: Store, root: Path) -> list[Path]:
    """The layers every tagged build stacks (snapshots' too: a snapshot is a build), which
    collection keeps, on the machine whose state directory is `root`."""
    layers: list[Path] = []
    for template in store.templates():
        for tag in store.tags(template.template_id):
            build = store.build(tag.build_id)
            if build is not None and build.image is not None:
                layers.extend(TemplateImage.from_record(build.image, root).layer_paths)
    return layers


class Templates:
    """The templates of one store; `in_use(template_id)` says whether sandboxes use one; `root`:
    the state directory the images it resolves are on (sandboxd.layers.portable)."""

    def __init__(self, store: Store, in_use: Callable[[str], bool], root: Path) -> None:
        self.store = store
        self._in_use = in_use
        self.root = root

    def all(self, team_id: str | None = None) -> list[TemplateRow]:
        """Every template, or the team's."""
        return self.store.templates(team_id)

    def get(self, id_or_alias: str, team_id: str | None = None) -> TemplateRow:
        """The template of that id or alias; given a team, only one of the team's own (what
        it may change, build, tag and delete).

        Raises:
            TemplateNotFound: no such template (of the team's), as for an unknown one.
        """
        return self._find(id_or_alias, team_id, public_too=False)

    def visible(self, id_or_alias: str, team_id: str) -> TemplateRow:
        """The team's template of that id or alias, or a public one (what it may boot).
        Raises TemplateNotFound."""
        return self._find(id_or_alias, team_id, public_too=True)

    def _find(self, id_or_alias: str, team_id: str | None, public_too: bool) -> TemplateRow:
        template = self.store.template(id_or_alias, team_id or DEFAULT_TEAM_ID)
        if template is None:
            raise TemplateNotFound(id_or_alias)
        if team_id not in (None, template.team_id) and not (public_too and template.public):
            raise TemplateNotFound(id_or_alias)  # another team's: as if there were none
        return template

    def _own(self, name: str, team_id: str) -> TemplateRow | None:
        """The team's own template of that name, if any (another team's of it is not)."""
        template = self.store.template(name, team_id)
        return template if template is not None and template.team_id == team_id else None

    async def create_over_base(self, alias: str, cpu_count: int, memory_mb: int,
                               disk_mb: int | None, team_id: str = DEFAULT_TEAM_ID) -> TemplateRow:  # fmt: skip
        """A template of the team named `alias` over base's root filesystem; an alias the team
        took already gets a new build of the same template, as the reference does."""
        base = self.get(BASE)
        now = now_us()
        template = self._own(alias, team_id)
        if template is None:
            template = TemplateRow(new_template_id(), alias, "", base.rootfs, 0, 0,
                                   base.disk_size_mb, "ready", base.envd_version, now, now,
                                   build_count=0, team_id=team_id)  # fmt: skip
        template.build_id = new_build_id()
        template.cpu_count, template.memory_mb = cpu_count, memory_mb
        if disk_mb is not None:
            template.disk_size_mb = disk_mb
        template.build_count += 1
        template.updated_at = now
        await self.store.write(functools.partial(self.store.put_template, template))
        return template

    def resolve(self, ref: str, team_id: str | None = None) -> tuple[TemplateRow, TemplateImage]:
        """The template `ref` names (`id`, `name`, `id:tag`, `name:tag`; given a team, of the
        team's or a public one) and the image its sandboxes boot.

        Raises:
            TemplateNotFound: no such template (the team may boot), or no such tag.
            NotFound: the template has no successful build to boot yet.
        """
        name, tag = split_ref(ref)
        template = self.get(name) if team_id is None else self.visible(name, team_id)
        row = self.store.tag(template.template_id, tag or DEFAULT_TAG)
        if row is None:
            if tag in (None, DEFAULT_TAG) and template.rootfs:
                return template, TemplateImage.of_rootfs(template.rootfs, self.root)
            if tag is None:
                raise NotFound(f"template '{name}' has no successful build yet")
            raise TemplateNotFound(ref)
        build = self.store.build(row.build_id)
        if build is None or build.image is None:
            raise NotFound(f"template '{ref}': its build {row.build_id} has no image")
        return template, TemplateImage.from_record(build.image, self.root)

    async def request_build(self, ref: str, tags: list[str], cpu_count: int, memory_mb: int,
                            disk_mb: int | None, team_id: str = DEFAULT_TEAM_ID,
                            ) -> tuple[TemplateRow, BuildRow]:  # fmt: skip
        """`POST /v3/templates`: a `waiting` build of the team's template named in `ref` (`name`
        or `name:tag`; made if new), to get `tags` (and the one in `ref`; `default` if none)
        once it succeeds.

        Raises:
            NotAllowed: a malformed name or tag, or `base`.
        """
        name, tag = split_ref(ref)
        check_name(name)
        wanted = list(dict.fromkeys(([tag] if tag else []) + tags)) or [DEFAULT_TAG]
        for t in wanted:
            check_tag(t)
        if name == BASE:
            raise NotAllowed("the base template is sandboxd's own: it cannot be built")
        now = now_us()
        template = self._own(name, team_id)
        if template is None:
            base = self.get(BASE)
            template = TemplateRow(new_template_id(), name, "", "", cpu_count, memory_mb,
                                   base.disk_size_mb, "waiting", base.envd_version, now, now,
                                   build_count=0, team_id=team_id)  # fmt: skip
        build = BuildRow(new_build_id(), template.template_id, "waiting", cpu_count, memory_mb,
                         template.disk_size_mb if disk_mb is None else disk_mb, now, now,
                         tags=wanted)  # fmt: skip
        template.build_id, template.build_status = build.build_id, build.status
        template.build_count += 1
        template.updated_at = now
        await self.store.write(
            functools.partial(self.store.put_template, template),
            functools.partial(self.store.put_build, build),
        )
        return template, build

    def newest_images(self) -> list[tuple[TemplateRow, TemplateImage]]:
        """Every template that has something to boot, with the image of its newest ready
        build (its root filesystem without one): two reads of the store however many there
        are, for a node's heartbeat (over a shared database a `resolve` each is several round
        trips on the event loop). Not a create's answer: `resolve` follows the tags.

        Raises:
            StoreUnavailable: the store's database is away.
        """
        newest = {b.template_id: b for b in self.store.builds(status="ready") if b.image}
        found = []
        for template in self.store.templates():
            build = newest.get(template.template_id)  # builds come oldest first
            if build is not None and build.image is not None:
                found.append((template, TemplateImage.from_record(build.image, self.root)))
            elif template.rootfs:
                found.append((template, TemplateImage.of_rootfs(template.rootfs, self.root)))
        return found

    def build(self, template_id: str, build_id: str, team_id: str | None = None) -> BuildRow:
        """A build of the (team's) template. Raises TemplateNotFound, NotFound."""
        template = self.get(template_id, team_id)
        build = self.store.build(build_id)
        if build is None or build.template_id != template.template_id:
            raise NotFound(f"build '{build_id}' of template '{template_id}' not found")
        return build

    async def assign_tags(self, target: str, tags: list[str], team_id: str) -> BuildRow:
        """`POST /templates/tags`: `tags` point at the build `target` (`name:tag`) points at.

        Raises:
            TemplateNotFound: no such template or tag; NotAllowed: a malformed tag.
        """
        for new in tags:
            check_tag(new)
        name, tag = split_ref(target)
        template = self.get(name, team_id)
        row = self.store.tag(template.template_id, tag or DEFAULT_TAG)
        if row is None:
            raise TemplateNotFound(target)
        build = self.store.build(row.build_id)
        assert build is not None  # noqa: S101  # a tag's build is deleted only with its template
        now = now_us()
        put = functools.partial(self.store.put_tag, template.template_id)
        await self.store.write(*(functools.partial(put, t, build.build_id, now) for t in tags))
        return build

    async def remove_tags(self, name: str, tags: list[str], team_id: str) -> None:
        """`DELETE /templates/tags` of the team's template. Raises TemplateNotFound (the
        template or a tag)."""
        template = self.get(name, team_id)
        for tag in tags:
            if self.store.tag(template.template_id, tag) is None:
                raise TemplateNotFound(f"{name}:{tag}")
        await self.store.write(
            *(functools.partial(self.store.delete_tag, template.template_id, t) for t in tags)
        )

    async def set_public(self, template: TemplateRow, public: bool) -> None:
        template.public = public
        template.updated_at = now_us()
        await self.store.write(functools.partial(self.store.put_template, template))

    async def delete(self, id_or_alias: str, team_id: str | None = None) -> None:
        """Delete the (team's) template. Raises TemplateNotFound; NotAllowed for base and for
        a template sandboxes use."""
        template = self.get(id_or_alias, team_id)
        if template.template_id == BASE:
            raise NotAllowed("the base template cannot be deleted")
        if self._in_use(template.template_id):
            raise NotAllowed(f"template '{template.template_id}' is used by sandboxes")
        await self.store.write(
            functools.partial(self.store.delete_template, template.template_id),
            functools.partial(self.store.delete_builds, template.template_id),
            functools.partial(self.store.delete_snapshots, template.template_id),
        )
