"""The sandboxes' lives as the node service offers them (sandboxd.node.local): create (from the
warm pool or a boot, then envd's /init), kill, pause, resume and connect, fork, timeouts, and
adoption after a restart. Every change is written to the store; the Runtime does the work on the
host.

States are `running` and `paused`. A sandbox being killed is gone at once (404, unlisted); one
being paused or resumed holds its lock, so other transitions wait for it."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxError, SandboxNotFound, TeardownError, TemplateError, WrongState
from sandboxd.ids import now_us
from sandboxd.images.shared_layers import SharedLayers
from sandboxd.lifecycle.adoption import adopt
from sandboxd.lifecycle.disk_pause import DiskPauses
from sandboxd.lifecycle.egress import restore_proxied
from sandboxd.lifecycle.evictor import EXPIRE_RETRY_S, Evictor
from sandboxd.lifecycle.fork import Forks
from sandboxd.lifecycle.guest_start import start_guest
from sandboxd.lifecycle.ingress import LOCAL_NODE, Credentials, Ingress, Location
from sandboxd.lifecycle.lifetimes import Lifetimes
from sandboxd.lifecycle.made_layers import release
from sandboxd.lifecycle.moves import Moves
from sandboxd.lifecycle.pauses import Pauses
from sandboxd.lifecycle.sampler import MetricsSampler
from sandboxd.lifecycle.sandbox import Sandbox, ingress_of
from sandboxd.lifecycle.snapshots import Snapshots
from sandboxd.lifecycle.template_boxes import TemplateBoxes
from sandboxd.lifecycle.tokens import Tokens
from sandboxd.lifecycle.volume_mounts import VolumeMounts
from sandboxd.lifecycle.wake import Waker
from sandboxd.templates import catalog
from sandboxd.templates.catalog import Templates, tagged_layers

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from sandboxd.guest.client import EnvdClient
    from sandboxd.layers.store import LayerStore
    from sandboxd.lifecycle.guest_start import CreateRecord
    from sandboxd.lifecycle.sandbox import CreateRequest
    from sandboxd.runtime.engine import Box, Runtime
    from sandboxd.runtime.spec import VolumeMount
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import TemplateRow
    from sandboxd.templates.image import TemplateImage
    from sandboxd.templates.snapshots import Listed

log = logging.getLogger("sandboxd.lifecycle")


class SandboxManager:
    """Every sandbox of one state directory. Implements `sandboxd.proxy.routing.SandboxLookup`."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        envd: EnvdClient,
        secret: bytes,
        max_timeout_s: int,
        pool_size: int,
        layers: LayerStore,
        shared: SharedLayers | None = None,  # serve's --registry: layers pushed and pulled
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.lifetimes = Lifetimes(max_timeout_s)
        self.tokens = Tokens(secret)
        self.templates = Templates(store, self.uses_template, layers.root)
        self._sandboxes: dict[str, Sandbox] = {}
        self._gone_callbacks: list[Callable[[str], None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.envd = envd  # reaches each sandbox from its create (or adoption) to its kill
        shared = shared or SharedLayers(layers)
        self.boxes = TemplateBoxes(runtime, envd, pool_size, shared)
        self.disks = DiskPauses(store, runtime, envd, layers, shared)
        self.pauses = Pauses(store, runtime, envd, self.disks, self._gone)
        self.snapshots = Snapshots(store, runtime, layers, shared)
        self.forks = Forks(runtime, envd, layers, self.tokens)
        self.moves = Moves(store, self._sandboxes, self.tokens, shared)
        self.waker = Waker(self.get_live, self.pauses, self.lifetimes)
        self.evictor = Evictor(self.all, self._end_of)
        self.sampler = MetricsSampler(store, envd, self._running, self._sandboxes.__contains__)
        self.volumes = VolumeMounts(self.all)  # serve attaches the volume catalog

    # SandboxLookup

    def locate(self, sandbox_id: str) -> Location | None:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or not sandbox.running or sandbox.box is None:
            return None
        return Location(LOCAL_NODE, sandbox.box.dialer)

    def ingress(self, sandbox_id: str) -> Ingress:
        sandbox = self._sandboxes.get(sandbox_id)
        return Ingress() if sandbox is None else sandbox.ingress

    async def wake(self, sandbox_id: str, port: int, credentials: Credentials) -> Location | None:
        await self.waker.wake(sandbox_id, port, credentials)
        return self.locate(sandbox_id)

    def sandbox_for_signature(
        self, path: str, operation: str, username: str, signature: str, expiration: str | None
    ) -> str | None:
        signed = (path, operation, username, signature, expiration)
        return next((s.id for s in self._sandboxes.values() if s.signed(*signed)), None)

    def on_gone(self, callback: Callable[[str], None]) -> None:
        """Call `callback(id)` whenever a sandbox stops serving (killed, paused, expired)."""
        self._gone_callbacks.append(callback)

    def _gone(self, sandbox_id: str) -> None:
        for callback in self._gone_callbacks:
            try:
                callback(sandbox_id)
            except Exception:  # one bad listener must not stop a kill
                log.exception("on_gone callback for %s failed", sandbox_id)

    # Lookups

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def get_live(self, sandbox_id: str) -> Sandbox | None:
        """The sandbox, running or paused; None when unknown or being killed."""
        sandbox = self._sandboxes.get(sandbox_id)
        return None if sandbox is None or sandbox.dying else sandbox

    def existing(self, sandbox_id: str) -> Sandbox:
        """The sandbox, running or paused; raises SandboxNotFound (also for one being killed)."""
        sandbox = self.get_live(sandbox_id)
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        return sandbox

    def all(self) -> list[Sandbox]:
        return list(self._sandboxes.values())

    def _running(self) -> list[Sandbox]:
        return [s for s in self._sandboxes.values() if s.running]

    def uses_template(self, template_id: str) -> bool:
        return any(s.row.template_id == template_id for s in self._sandboxes.values())

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Start and stop

    async def start(self) -> None:
        """Adopt what a previous sandboxd left, then start the evictor, sampler and pool."""
        if self.runtime.egress_proxy is not None:
            await self.runtime.egress_proxy.start()
        for sandbox in await adopt(self.runtime, self.store, self.tokens, self.disks.layers):
            self._sandboxes[sandbox.id] = sandbox
            if sandbox.box is not None:  # None: paused to disk
                self.envd.reach(sandbox.id, sandbox.box.dialer)
        await restore_proxied(self, self._sandboxes.values())
        self._spawn(self.evictor.run())
        self._spawn(self.sampler.run())
        self.boxes.fill_every(self.templates)

    async def stop(self) -> None:
        """Stop the background work; sandboxes keep running for the next start to adopt."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.boxes.close()
        if self.runtime.egress_proxy is not None:
            await self.runtime.egress_proxy.close()
        for box in (s.box for s in self._sandboxes.values() if s.box is not None):
            self.runtime.release(box)

    # Create

    async def create(self, request: CreateRequest, record: CreateRecord | None = None) -> Sandbox:
        """Boot (or take a warm) sandbox of the template with its volumes, /init it (`record`
        written meanwhile: sandboxd.lifecycle.guest_start), record it.

        Raises:
            NotAllowed: a timeout of 0 or past the maximum, or volume mounts that are not.
            TemplateNotFound, TemplateError: no such template, or an unusable one.
            BootError, InitRefused: the sandbox did not come up (nothing of it is left).
            What `record.write` raised (nothing of the sandbox is left).
        """
        self.lifetimes.check(request.timeout_s)
        template, image = self.templates.resolve(request.template, request.team_id)
        mounts = self.volumes.resolve(request.options.get("volumeMounts"), request.team_id)
        with self.volumes.creating(mounts):  # in use until the sandbox is listed
            return await self._create(request, template, image, mounts, record)

    async def _create(self, request: CreateRequest, template: TemplateRow, image: TemplateImage,
                      mounts: tuple[VolumeMount, ...],
                      record: CreateRecord | None) -> Sandbox:  # fmt: skip
        limits = catalog.limits(template)
        try:
            box = await self.boxes.take(image, limits, template.disk_size_mb, mounts)
        except TemplateError as exc:
            raise TemplateError(f"template '{template.template_id}' is unusable: {exc}") from exc
        # Times are set again once envd took /init; these keep the evictor off meanwhile.
        started = now_us()
        row = request.row(box.id, template, started, box.uid_base)
        row.env_vars = {**image.env, **row.env_vars}  # the template's ENV, the create's first
        row.default_user, row.default_workdir = image.user, image.workdir
        token = self.tokens.envd(box.id) if request.secure else None
        sandbox = Sandbox(row, box, token, ingress_of(row, self.tokens.traffic(box.id)))
        # Neither listed nor known to the API and the proxy until the create succeeds.
        await start_guest(self.runtime, self.envd, sandbox, box, record)
        count = functools.partial(self.store.count_spawn, template.template_id)
        await self._admit(sandbox, request.timeout_s, count)
        return sandbox

    async def fork(
        self, sandbox_id: str, timeout_s: int, count: int
    ) -> list[Sandbox | SandboxError]:
        """`count` new sandboxes of a running sandbox's files, for `timeout_s`
        (sandboxd.lifecycle.fork); each entry a child, or why it did not start.

        Raises:
            NotAllowed: the timeout; SandboxNotFound; WrongState: it is paused;
            SandboxError: its files could not be captured.
        """
        self.lifetimes.check(timeout_s)
        parent = self.existing(sandbox_id)
        async with parent.lock:
            self.existing(sandbox_id)
            source = await self.forks.capture(parent)
        return await self.forks.children(source, timeout_s, count, self._admit)

    async def _admit(self, sandbox: Sandbox, timeout_s: int, *more: Callable[[int], None]) -> None:
        """Record a sandbox that took its /init, running for `timeout_s` from now, and make it
        known; `more(started_at)` are written with it."""
        row = sandbox.row
        row.started_at = now_us()
        row.end_at = row.started_at + timeout_s * 1_000_000
        self._sandboxes[sandbox.id] = sandbox
        await self.store.write(
            functools.partial(self.store.put_sandbox, row),
            functools.partial(
                self.store.add_event, row.started_at, sandbox.id, "created", "", row.team_id
            ),
            *(functools.partial(write, row.started_at) for write in more),
        )
        self._spawn(self.sampler.first(sandbox))  # the first metrics point, without waiting 5 s

    async def _off_host(self, box: Box) -> None:
        """Remove the sandbox from the host, and sandboxd's own connections into it.

        Raises:
            SandboxError: the host could not remove everything (a retry continues).
        """
        await self.envd.forget(box.id)
        await self.runtime.kill(box)

    # Kill, pause, resume, connect, timeout

    async def kill(self, sandbox_id: str, reason: str = "killed") -> None:
        """Kill a running or paused sandbox.

        Raises:
            SandboxNotFound: there is none.
            TeardownError: the host could not remove everything (a retry continues).
        """
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        self._gone(sandbox_id)
        async with sandbox.lock:
            await self._remove(sandbox, reason)

    async def _remove(self, sandbox: Sandbox, reason: str) -> None:
        """The rest of a kill, under the sandbox's lock, once it is out of `_sandboxes` (the
        API and the proxy no longer see it): the host's teardown, then the row. A teardown that
        fails puts the sandbox back as dying, so that a retried kill (or the evictor) continues
        it; the row stays until the host is clean.

        Raises:
            TeardownError: the host could not remove everything.
        """
        try:
            if sandbox.box is not None:
                await self._off_host(sandbox.box)
            kept = (*self.forks.in_flight, *tagged_layers(self.store, self.disks.layers.root))
            await release(self.disks.layers, sandbox, self._sandboxes.values(), kept)
        except SandboxError as exc:
            sandbox.dying = True
            self._sandboxes.setdefault(sandbox.id, sandbox)
            self.evictor.keep_off(sandbox.id, EXPIRE_RETRY_S)  # a DELETE may come sooner
            raise TeardownError(f"killing {sandbox.id}: {exc}") from exc
        await self.store.write(
            functools.partial(self.store.delete_sandbox, sandbox.id),
            functools.partial(self.store.add_event, now_us(), sandbox.id, reason),
        )

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        """Freeze a running sandbox (processes and memory kept), or without `memory` to disk.

        Raises:
            SandboxNotFound; WrongState: already paused; SandboxError: the pause failed.
        """
        sandbox = self.existing(sandbox_id)
        async with sandbox.lock:
            self.existing(sandbox_id)  # killed while this waited for the lock?
            await self.pauses.pause(sandbox, memory)

    async def resume(self, sandbox_id: str, timeout_s: int) -> Sandbox:
        """Thaw a paused sandbox for `timeout_s` (POST /sandboxes/{id}/resume).

        Raises:
            NotAllowed: the timeout; SandboxNotFound; WrongState: already running;
            SandboxError: the thaw failed.
        """
        self.lifetimes.check(timeout_s)
        sandbox = self.existing(sandbox_id)
        async with sandbox.lock:
            self.existing(sandbox_id)
            if sandbox.running:
                raise WrongState(f"Sandbox {sandbox_id} is already running")
            await self.pauses.thaw(sandbox, timeout_s)
        return sandbox

    async def connect(
        self, sandbox_id: str, timeout_s: int, memory: bool = True
    ) -> tuple[Sandbox, bool]:
        """Resume a paused sandbox (without `memory`, by a boot from its files), or extend a
        running one's end (never shorten it). Returns the sandbox and whether it was resumed.

        Raises:
            NotAllowed: the timeout; SandboxNotFound; SandboxError: the thaw failed.
        """
        self.lifetimes.check(timeout_s, positive=False)
        sandbox = self.existing(sandbox_id)
        async with sandbox.lock:
            self.existing(sandbox_id)
            if not sandbox.running:
                await self.pauses.thaw(sandbox, timeout_s, memory)
                return sandbox, True
            self.lifetimes.extend(sandbox.row, timeout_s, now_us())
            await self.store.write(functools.partial(self.store.put_sandbox, sandbox.row))
        return sandbox, False

    async def snapshot(self, sandbox_id: str, name: str | None) -> Listed:
        """Snapshot a running sandbox, which runs on; `name`: `[namespace/]alias[:tag]`.

        Raises:
            NotAllowed: a bad name; SandboxNotFound: unknown or paused; WrongState: being paused
            or resumed; SandboxError: the capture failed.
        """
        sandbox = self.existing(sandbox_id)
        self.snapshots.check(sandbox)
        async with sandbox.lock:
            self.existing(sandbox_id)
            return await self.snapshots.take(sandbox, name)

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        """endAt = now + timeout, clamped to the max length from the last start.

        Raises:
            SandboxNotFound: unknown or paused; NotAllowed: the max length is used up.
        """
        sandbox = self.existing(sandbox_id)
        if not sandbox.running:
            raise SandboxNotFound(sandbox_id)  # paused ones are not live: the reference's 404
        self.lifetimes.set(sandbox.row, timeout_s, now_us())
        await self.store.write(functools.partial(self.store.put_sandbox, sandbox.row))

    async def _end_of(self, sandbox: Sandbox) -> None:
        """The evictor's work at a sandbox's end, under its lock: a connect or set_timeout since
        the evictor looked may have moved the end, and a pause or kill may have come first."""
        async with sandbox.lock:
            if self._sandboxes.get(sandbox.id) is not sandbox:
                return
            if sandbox.dying:  # a kill that stopped halfway: carry on with it
                self._sandboxes.pop(sandbox.id)
                await self._remove(sandbox, "killed")
                return
            if not sandbox.running or sandbox.row.end_at > now_us():
                return
            if sandbox.row.auto_pause:  # autoPauseMemory false: to disk
                await self.pauses.pause(
                    sandbox, sandbox.row.options.get("autoPauseMemory") is not False
                )
                return
            self._sandboxes.pop(sandbox.id)
            self._gone(sandbox.id)
            await self._remove(sandbox, "expired")
