"""The builder: runs the builds the API starts, a few at a time (each boots sandboxes and
unpacks layers: more at once only makes each slower on a small machine), keeps each running
build's log in memory for the status calls and records the outcome: a ready build's image and
tags, or a failed build's reason. A build never stays `building` past its sandboxd: stopping
sandboxd fails the running builds, and a new sandboxd fails those a crash left behind."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.builds.base_phase import ImageSource, base_of
from sandboxd.builds.build_log import BuildLog
from sandboxd.builds.build_run import Context, StepFailed, finalize, run_steps
from sandboxd.builds.build_sandbox import BuildSandboxes
from sandboxd.builds.collect import layer_users
from sandboxd.builds.uploads import Uploads
from sandboxd.errors import NotAllowed, SandboxError, StoreUnavailable
from sandboxd.host.cgroups import Limits
from sandboxd.ids import now_us
from sandboxd.images.shared_layers import SharedLayers
from sandboxd.layers.collect import collect
from sandboxd.layers.quota import StorageQuota
from sandboxd.layers.store import LayerStore
from sandboxd.store.rows import DEFAULT_TEAM_ID
from sandboxd.templates.catalog import PIDS_LIMIT

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.builds.recipe import Recipe
    from sandboxd.builds.systemd_init import Provision
    from sandboxd.guest.client import EnvdClient
    from sandboxd.runtime.engine import Runtime
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import BuildRow, LogLine
    from sandboxd.templates.catalog import Templates
    from sandboxd.templates.image import TemplateImage

log = logging.getLogger("sandboxd.builds.builder")

CONCURRENT_BUILDS = 2
STOPPED = "sandboxd stopped during the build"
RESTARTED = "sandboxd restarted during the build"
DEADLINE_OPTION = "--build-timeout"
# A build's longest life by default: E2B's builds of large images with many steps take minutes;
# one that runs an hour is stuck (a step waiting for ever) and holds one of the build slots.
DEFAULT_DEADLINE_S = 3600


@dataclass(frozen=True)
class BuildLimits:
    """How long a build may run (once it has a slot), and how much of the state disk uploads
    and layers may fill together (bytes)."""

    deadline_s: float = DEFAULT_DEADLINE_S
    storage_bytes: int | None = None  # None: no quota

    def quota(self, state_dir: Path) -> StorageQuota | None:
        """The storage quota over the state directory's layers and uploads (None: none)."""
        if self.storage_bytes is None:
            return None
        return StorageQuota((state_dir / "layers", state_dir / "uploads"), self.storage_bytes)


class Builder:
    def __init__(
        self,
        store: Store,
        templates: Templates,
        runtime: Runtime,
        envd: EnvdClient,
        state_dir: Path,
        envd_artifact: Path | None = None,
        mirror: str | None = None,
        limits: BuildLimits = BuildLimits(),  # frozen: one shared default is fine
        provision: Provision = "auto",
        shared: SharedLayers | None = None,  # serve's --registry
    ) -> None:
        self.store = store
        self.templates = templates
        self.storage = limits.quota(state_dir)
        self.layers = LayerStore(state_dir / "layers", self.storage)
        self.shared = shared or SharedLayers(self.layers)
        self.uploads_dir = state_dir / "uploads"
        self.deadline_s = limits.deadline_s
        self.source = ImageSource(self.layers, self.storage, envd_artifact, mirror,
                                  provision)  # fmt: skip
        self.sandboxes = BuildSandboxes(runtime, envd)
        self._slots = asyncio.Semaphore(CONCURRENT_BUILDS)
        self._running: dict[str, tuple[asyncio.Task[None], BuildLog]] = {}

    def uploads(self, template_id: str) -> Uploads:
        return Uploads(self.uploads_dir / template_id, self.storage)

    async def recover(self) -> None:
        """At start: builds a previous sandboxd left `building` failed; half-made layers and
        uploads gone."""
        await asyncio.to_thread(self.layers.remove_leftovers)
        if self.uploads_dir.is_dir():
            for template_dir in self.uploads_dir.iterdir():
                await asyncio.to_thread(self.uploads(template_dir.name).remove_leftovers)
        try:
            for build in self.store.builds(status="building"):
                await self._fail(build, RESTARTED, None, None)
            await self.collect()
        except StoreUnavailable as exc:  # a node agent's shared database away: nothing known
            log.warning("builds not recovered nor layers collected at start: %s", exc)

    async def collect(self) -> None:
        """Remove the layers no template or sandbox uses (sandboxd.layers.collect)."""
        users = layer_users(self.store, self.sandboxes.runtime.sandboxes_dir, self.layers.root)
        await asyncio.to_thread(collect, self.layers, users)

    async def close(self) -> None:
        tasks = [task for task, _ in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def start(self, build: BuildRow, recipe: Recipe) -> None:
        """Start a `waiting` build. Raises NotAllowed for any other."""
        if build.status != "waiting":
            raise NotAllowed(f"build {build.build_id} is not in waiting state ({build.status})")
        build.status, build.recipe, build.updated_at = "building", recipe.model_dump(), now_us()
        await self._record(build)
        build_log = BuildLog(self.store, build.build_id)
        task = asyncio.create_task(self._run(build, recipe, build_log))
        self._running[build.build_id] = (task, build_log)

    async def cancel(self, template_id: str) -> None:
        """Stop the template's running builds (it is being deleted)."""
        for build_id, (task, _) in list(self._running.items()):
            build = self.store.build(build_id)
            if build is not None and build.template_id == template_id:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def log_page(self, build: BuildRow, offset: int, limit: int) -> list[LogLine]:
        running = self._running.get(build.build_id)
        if running is not None:
            return running[1].page(offset, limit)
        return self.store.log_lines(build.build_id, offset, limit)

    async def _run(self, build: BuildRow, recipe: Recipe, build_log: BuildLog) -> None:
        try:
            # A step stuck where cancelling cannot reach (a thread) is left behind, its slot
            # freed: the build fails now rather than hold it for ever.
            async with self._slots, asyncio.timeout(self.deadline_s):
                await self._build(build, recipe, build_log)
        except TimeoutError:
            message = (f"the build ran past its deadline of {self.deadline_s:g} s "
                       f"(serve {DEADLINE_OPTION})")  # fmt: skip
            await self._fail(build, message, build_log.last_step, build_log)
        except asyncio.CancelledError:
            await self._fail(build, STOPPED, None, build_log)
            raise
        finally:
            self._running.pop(build.build_id, None)

    async def _build(self, build: BuildRow, recipe: Recipe, build_log: BuildLog) -> None:
        limits = Limits(build.memory_mb << 20, build.cpu_count, PIDS_LIMIT)
        ctx = Context(self.layers, self.uploads(build.template_id), self.sandboxes, limits,
                      build.disk_size_mb, self.storage)  # fmt: skip
        try:
            build_log.add(f"building from {recipe.fromTemplate or recipe.fromImage}", step="base")
            try:
                await self._within_quota("the build's image")
                owner = self.templates.store.template(build.template_id)
                team_id = DEFAULT_TEAM_ID if owner is None else owner.team_id
                base = await base_of(recipe, self.templates, self.source, ctx, build_log, team_id)
                await self.shared.fetch(base.image.layer_paths)  # a template built elsewhere
                await self._within_quota("the build's image")  # a pull is not bounded on the way
            except SandboxError as exc:
                raise StepFailed("base", f"base: {exc}") from exc
            image = await run_steps(recipe, base, ctx, build_log)
            await finalize(image, ctx, build_log)
            await self._publish(image, build_log)
        except StepFailed as exc:
            await self._fail(build, str(exc), exc.step, build_log)
            return
        except Exception as exc:
            log.exception("build %s failed", build.build_id)
            await self._fail(build, f"internal error: {exc}", None, build_log)
            return
        build_log.add("build finished: template ready")
        await build_log.flush()
        now = now_us()
        build.status, build.image = "ready", image.record(self.layers.root)
        build.updated_at = build.finished_at = now
        tags = [functools.partial(self.store.put_tag, build.template_id, t, build.build_id, now)
                for t in build.tags]  # fmt: skip
        await self._record(build, *tags)

    async def _publish(self, image: TemplateImage, build_log: BuildLog) -> None:
        """Push the template's layers to serve's --registry (if any): a build is ready only
        once every machine can boot it.

        Raises:
            StepFailed: the push failed (step `push`).
        """
        if self.shared.registry is None:
            return
        build_log.add(f"pushing the layers to {self.shared.registry.url}", step="push")
        try:
            await self.shared.push(image.layer_paths)
        except SandboxError as exc:
            raise StepFailed("push", f"push: {exc}") from exc

    async def _within_quota(self, what: str) -> None:
        """Raises StorageFull when uploads and layers fill the storage quota."""
        if self.storage is not None:
            await asyncio.to_thread(self.storage.check, what)

    async def _fail(
        self, build: BuildRow, message: str, step: str | None, build_log: BuildLog | None
    ) -> None:
        if build_log is not None:
            build_log.add(message, "error", step)
            await build_log.flush()
        now = now_us()
        build.status, build.updated_at, build.finished_at = "error", now, now
        build.reason = {"message": message} | ({"step": step} if step else {})
        await self._record(build)

    async def _record(self, build: BuildRow, *changes: Callable[[], None]) -> None:
        """The build as it is now, `changes` with it, and the template's status when this is
        its latest build (the template shows that one's), in one transaction; nothing when the
        template was deleted meanwhile."""
        template = self.store.template(build.template_id)
        if template is None:
            return
        writes: list[Callable[[], None]] = [
            functools.partial(self.store.put_build, build),
            *changes,
        ]
        if template.build_id == build.build_id:
            template.build_status, template.updated_at = build.status, now_us()
            writes.append(functools.partial(self.store.put_template, template))
        await self.store.write(*writes)
