"""Snapshots as templates, E2B's model: a snapshot of a sandbox is a build of a template, its
image the sandbox's layers with a layer of its files on top (sandboxd.lifecycle.snapshots takes
it), tagged as any build is (`default` unless its name gives a tag), so that a create resolves
its id or name as it resolves any template's. The `snapshots` table says which builds are
snapshots and of which sandbox. Here: snapshot names, the records of a snapshot being taken,
and what `GET /snapshots` lists."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.errors import NotAllowed, NotFound
from sandboxd.ids import new_build_id, new_template_id, now_us
from sandboxd.store.rows import DEFAULT_TEAM_SLUG, BuildRow, SnapshotRow, TemplateRow
from sandboxd.templates.catalog import BASE, DEFAULT_TAG
from sandboxd.templates.image import DEFAULT_USER, DEFAULT_WORKDIR, IO_URING_ENV, TemplateImage

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.runtime.spec import BootImage
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import SandboxRow

# E2B's rules for a name's parts (infra: shared/pkg/id), after trimming and lower-casing.
ALIAS = re.compile(r"^[a-z0-9_-]+$")
TAG = re.compile(r"^[a-z0-9_.-]+$")
SNAPSHOT_STEP = "snapshot"  # a failed snapshot's `reason.step`


@dataclass(frozen=True)
class SnapshotName:
    """`[namespace/]alias[:tag]` parsed: `tag` None when the name has none."""

    alias: str
    tag: str | None = None


def parse_name(name: str, team_slug: str) -> SnapshotName:
    """A snapshot's name by E2B's rules: each part trimmed and lower-cased; the namespace, if
    any, the team's slug (and dropped: a team's template names are its own).

    Raises:
        NotAllowed: `Invalid name: …`, or `namespace 'x' must match your team 'y'`.
    """
    namespace, slash, rest = name.partition("/")
    if not slash:
        namespace, rest = "", name
    alias, colon, tag = (part.strip().lower() for part in rest.partition(":"))
    if not ALIAS.match(alias):
        raise NotAllowed(f"Invalid name: alias '{alias}' must match {ALIAS.pattern}")
    if colon and not TAG.match(tag):
        raise NotAllowed(f"Invalid name: tag '{tag}' must match {TAG.pattern}")
    if slash:
        namespace = namespace.strip().lower()
        if not ALIAS.match(namespace):
            raise NotAllowed(f"Invalid name: namespace '{namespace}' must match {ALIAS.pattern}")
        if namespace != team_slug:
            raise NotAllowed(f"namespace '{namespace}' must match your team '{team_slug}'")
    return SnapshotName(alias, tag if colon else None)


def layer_name(build_id: str) -> str:
    """The layer of a snapshot's files, in the layer store."""
    return f"snapshot-{build_id}"


def names(template: TemplateRow) -> list[str]:
    return [template.alias] if template.alias else []


def snapshot_id(template: TemplateRow, tag: str) -> str:
    """What names one tag of a snapshot's template: `alias:tag`, or `templateID:tag`."""
    return f"{(names(template) or [template.template_id])[0]}:{tag}"


@dataclass(frozen=True)
class Pending:
    """A snapshot being taken: its build, `building` meanwhile (so that no collection removes
    its layer before it is recorded), in `template`, which is new when `made`."""

    template: TemplateRow
    build: BuildRow
    made: bool
    tag: str

    @property
    def layer_name(self) -> str:
        return layer_name(self.build.build_id)


@dataclass(frozen=True)
class Listed:
    """One snapshot template as `GET /snapshots` lists it."""

    snapshot_id: str
    names: list[str]
    created_at: int
    template_id: str


class SnapshotRecords:
    """The snapshots of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def slug(self, team_id: str) -> str:
        """The namespace of the team's names."""
        team = self.store.team(team_id)
        return DEFAULT_TEAM_SLUG if team is None else team.slug

    async def begin(self, source: SandboxRow, name: SnapshotName | None) -> Pending:
        """Record a `building` build of the template `name` names among the source's team's
        (made if new; a new unnamed one without), with the source's limits.

        Raises:
            NotAllowed: the name is base's, or another template's id.
        """
        now = now_us()
        template = None if name is None else self._named(name.alias, source.team_id)
        made = template is None
        if template is None:
            template = TemplateRow(new_template_id(), None if name is None else name.alias, "", "",
                                   source.cpu_count, source.memory_mb, source.disk_size_mb,
                                   "building", source.envd_version, now, now, build_count=0,
                                   team_id=source.team_id)  # fmt: skip
        tag = (name.tag if name is not None else None) or DEFAULT_TAG
        build = BuildRow(new_build_id(), template.template_id, "building", source.cpu_count,
                         source.memory_mb, source.disk_size_mb, now, now, tags=[tag])  # fmt: skip
        template = dataclasses.replace(template, build_id=build.build_id, build_status="building",
                                       build_count=template.build_count + 1, updated_at=now)  # fmt: skip
        await self.store.write(
            functools.partial(self.store.put_template, template),
            functools.partial(self.store.put_build, build),
        )
        return Pending(template, build, made, tag)

    def _named(self, alias: str, team_id: str) -> TemplateRow | None:
        """The team's template `alias` names, if any. Raises NotAllowed as `begin`."""
        if alias == BASE:
            raise NotAllowed("Invalid name: the base template is sandboxd's own")
        template = self.store.template(alias, team_id)
        if template is not None and template.alias != alias:
            raise NotAllowed(f"Invalid name: '{alias}' is the id of a template")
        return template if template is not None and template.team_id == team_id else None

    async def finish(
        self, pending: Pending, image: TemplateImage, sandbox_id: str, root: Path
    ) -> Listed:
        """Record the snapshot: its build ready with `image` (of the state directory `root`),
        its tag pointing at it.

        Raises:
            NotFound: its template was deleted meanwhile.
        """
        template = self.store.template(pending.template.template_id)
        if template is None:
            raise NotFound(f"template '{pending.template.template_id}' was deleted meanwhile")
        now = now_us()
        build = dataclasses.replace(pending.build, status="ready", image=image.record(root),
                                    updated_at=now, finished_at=now)  # fmt: skip
        if template.build_id == build.build_id:
            template.build_status = "ready"
        record = SnapshotRow(build.build_id, template.template_id, sandbox_id, now)
        await self.store.write(
            functools.partial(self.store.put_template, template),
            functools.partial(self.store.put_build, build),
            functools.partial(
                self.store.put_tag, template.template_id, pending.tag, build.build_id, now
            ),
            functools.partial(self.store.put_snapshot, record),
        )
        return Listed(snapshot_id(template, pending.tag), names(template),
                      template.created_at, template.template_id)  # fmt: skip

    def image(
        self, source: SandboxRow, booted: BootImage, layer: Path, root: Path
    ) -> TemplateImage:
        """What the children of a snapshot of `source` boot: its layers with `layer` on top;
        the env it ran with (its template's and its create's, as a child of E2B's memory
        snapshot has them in envd), its user and workdir; and its template's start and ready
        commands, which the child, a cold boot, runs as any new sandbox does. io_uring as the
        source had it, whatever its env says. `root`: this machine's state directory."""
        env = {k: v for k, v in source.env_vars.items() if k != IO_URING_ENV}
        if booted.io_uring:
            env[IO_URING_ENV] = "1"
        template = self._booted(source.template_id, tuple(str(p) for p in booted.layers), root)
        return TemplateImage(
            tuple(str(p) for p in (*booted.layers, layer)),
            booted.init,
            env,
            source.default_user or DEFAULT_USER,
            source.default_workdir or DEFAULT_WORKDIR,
            None if template is None else template.start_cmd,
            None if template is None else template.ready_cmd,
        )

    def _booted(
        self, template_id: str, layers: tuple[str, ...], root: Path
    ) -> TemplateImage | None:
        """The image of the template's that a sandbox booted with `layers` was made of: the
        longest whose layers start its stack (a resume from disk adds pause layers on top)."""
        images = [TemplateImage.from_record(b.image, root) for b in self.store.builds(template_id)
                  if b.status == "ready" and b.image is not None]  # fmt: skip
        template = self.store.template(template_id)
        if template is not None and template.rootfs:
            images.append(TemplateImage.of_rootfs(template.rootfs, root))
        stacked = [i for i in images if layers[: len(i.layers)] == i.layers]
        return max(stacked, key=lambda i: len(i.layers), default=None)

    async def abandon(self, pending: Pending, reason: str) -> None:
        """Undo `begin` after a failed capture: a new template goes; an existing one keeps its
        build, failed with `reason`."""
        template_id = pending.template.template_id
        if pending.made:
            await self.store.write(
                functools.partial(self.store.delete_template, template_id),
                functools.partial(self.store.delete_builds, template_id),
            )
            return
        now = now_us()
        build = dataclasses.replace(pending.build, status="error", updated_at=now, finished_at=now,
                                    reason={"message": reason, "step": SNAPSHOT_STEP})  # fmt: skip
        changes = [functools.partial(self.store.put_build, build)]
        template = self.store.template(template_id)
        if template is not None and template.build_id == build.build_id:
            template.build_status = "error"
            changes.append(functools.partial(self.store.put_template, template))
        await self.store.write(*changes)

    def listed(self, team_id: str, sandbox_id: str | None, name: SnapshotName | None,
               ) -> list[Listed]:  # fmt: skip
        """The team's snapshot templates, newest first (ties by id), of the sandbox
        `sandbox_id` and named `name` when given (a name without a tag: any tag), each named by
        its newest tag (of those the name allows)."""
        sources: dict[str, set[str]] = {}
        for record in self.store.snapshots():
            sources.setdefault(record.template_id, set()).add(record.sandbox_id)
        found = []
        for template_id, of in sources.items():
            template = self.store.template(template_id)
            if template is None or template.team_id != team_id:
                continue
            if sandbox_id is not None and sandbox_id not in of:
                continue
            if name is not None and name.alias not in (template.alias, template_id):
                continue
            tags = [t for t in self.store.tags(template_id) if name is None or
                    name.tag is None or t.tag == name.tag]  # fmt: skip
            if tags:
                newest = max(tags, key=lambda t: (t.created_at, t.tag))
                found.append(Listed(snapshot_id(template, newest.tag), names(template),
                                    template.created_at, template_id))  # fmt: skip
        return sorted(found, key=lambda s: (-s.created_at, s.template_id))
