"""The sandboxes' lives as the control API sees them: create (boot, or take from the warm pool,
then envd's /init), kill, pause, resume and connect, timeouts, and adoption after a restart.
Every change is written to the store; the Runtime does the work on the host.

States are `running` and `paused`. A sandbox being killed is gone at once (404, unlisted); one
being paused or resumed holds its lock, so other transitions wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import secrets
import string
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envd.http.signing import file_signature
from sandboxd.envd_client import EnvdClient, EnvdUnreachable
from sandboxd.errors import BootError, RequestError, SandboxError, TemplateError
from sandboxd.host.cgroups import Limits
from sandboxd.lifecycle.pool import WarmPool
from sandboxd.store import MetricSample, SandboxRow, TemplateRow

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from sandboxd.host.netns import NetNamespace
    from sandboxd.host.runtime import Box, Runtime
    from sandboxd.store import Store

log = logging.getLogger("sandboxd.lifecycle.manager")

ID_ALPHABET = string.ascii_lowercase + string.digits
PIDS_LIMIT = 4096
DEFAULT_USER = "user"
DEFAULT_WORKDIR = "/home/user"
INIT_DEADLINE_S = 10
INIT_RETRY_S = 0.005
EVICT_POLL_S = 0.05
EXPIRE_RETRY_S = 30.0  # after a pause or kill at the end failed
SAMPLE_EVERY_S = 5
# The reference gives envd 100 ms; a Python envd on a busy host needs more now and then.
SAMPLE_TIMEOUT_S = 1


def new_sandbox_id() -> str:
    """The reference's form: `i` and 20 of [a-z0-9] (no dash: hosts split on it)."""
    return "i" + "".join(secrets.choice(ID_ALPHABET) for _ in range(20))


def now_us() -> int:
    return time.time_ns() // 1000


def rfc3339(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def not_found(sandbox_id: str) -> RequestError:
    return RequestError(
        404, f"Sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it"
    )


def template_limits(template: TemplateRow) -> Limits:
    return Limits(template.memory_mb << 20, template.cpu_count, PIDS_LIMIT)


@dataclass
class CreateSpec:
    """A validated create request."""

    template: str
    timeout_s: int
    secure: bool
    auto_pause: bool
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sandbox:
    row: SandboxRow
    box: Box
    token: str | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # A kill that could not remove everything: listed (its record stays) until a retry does,
    # but neither running nor reachable; the evictor retries it.
    dying: bool = False

    @property
    def id(self) -> str:
        return self.row.sandbox_id

    @property
    def running(self) -> bool:
        return self.row.state == "running" and not self.dying


class SandboxManager:
    """Every sandbox of one state directory. Implements `sandboxd.proxy.routing.SandboxLookup`."""

    def __init__(
        self, store: Store, runtime: Runtime, secret: bytes, max_timeout_s: int, pool_size: int
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.max_timeout_s = max_timeout_s
        self._secret = secret
        self._sandboxes: dict[str, Sandbox] = {}
        # Created but not given their /init yet: reachable by sandboxd's own envd client only,
        # neither listed nor known to the API and the proxy until the create succeeds.
        self._starting: dict[str, Sandbox] = {}
        self._gone_callbacks: list[Callable[[str], None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._expiring: set[str] = set()
        self.envd = EnvdClient(self._netns_of)
        self.pool = WarmPool(runtime, pool_size, new_sandbox_id)

    # SandboxLookup

    def running_box(self, sandbox_id: str) -> Box | None:
        sandbox = self._sandboxes.get(sandbox_id)
        return sandbox.box if sandbox is not None and sandbox.running else None

    def knows(self, sandbox_id: str) -> bool:
        return sandbox_id in self._sandboxes

    def sandbox_for_signature(
        self, path: str, operation: str, username: str, signature: str, expiration: str | None
    ) -> str | None:
        for sandbox in self._sandboxes.values():
            if sandbox.running and sandbox.token is not None:
                expected = file_signature(path, operation, username, sandbox.token, expiration)
                if hmac.compare_digest(expected.encode(), signature.encode()):
                    return sandbox.id
        return None

    def on_gone(self, callback: Callable[[str], None]) -> None:
        self._gone_callbacks.append(callback)

    def _netns_of(self, sandbox_id: str) -> NetNamespace | None:
        sandbox = self._sandboxes.get(sandbox_id) or self._starting.get(sandbox_id)
        if sandbox is not None:
            return sandbox.box.netns
        return None

    def _gone(self, sandbox_id: str) -> None:
        for callback in self._gone_callbacks:
            try:
                callback(sandbox_id)
            except Exception:  # one bad listener must not stop a kill
                log.exception("on_gone callback for %s failed", sandbox_id)

    # Lookups

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def all(self) -> list[Sandbox]:
        return list(self._sandboxes.values())

    def uses_template(self, template_id: str) -> bool:
        return any(s.row.template_id == template_id for s in self._sandboxes.values())

    def envd_token(self, sandbox_id: str) -> str:
        """hex HMAC-SHA256(server secret, id): stable across pause, resume and restarts."""
        return hmac.new(self._secret, sandbox_id.encode(), hashlib.sha256).hexdigest()

    def traffic_token(self, sandbox_id: str) -> str:
        message = f"sandbox-traffic-{sandbox_id}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Start and stop

    async def start(self) -> None:
        """Adopt what a previous sandboxd left, then start the evictor, sampler and pool."""
        await self._adopt()
        self._spawn(self._evict_loop())
        self._spawn(self._sample_loop())
        for template in self.store.templates():
            self.pool.fill(Path(template.rootfs), template_limits(template), template.disk_size_mb)

    async def stop(self) -> None:
        """Stop the background work; sandboxes keep running for the next start to adopt."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pool.close()
        await self.envd.aclose()
        for sandbox in self._sandboxes.values():
            sandbox.box.netns.close()

    async def _adopt(self) -> None:
        boxes = {box.id: box for box in await asyncio.to_thread(self.runtime.adopt)}
        for row in self.store.sandboxes():
            box = boxes.pop(row.sandbox_id, None)
            if box is None:
                log.warning("sandbox %s did not survive the restart", row.sandbox_id)
                await self.store.write(
                    functools.partial(self.store.delete_sandbox, row.sandbox_id),
                    functools.partial(self.store.add_event, now_us(), row.sandbox_id, "lost"),
                )
                continue
            token = self.envd_token(row.sandbox_id) if row.secure else None
            sandbox = Sandbox(row, box, token)
            if row.uid_base != box.uid_base:  # the record on the host is the truth
                row.uid_base = box.uid_base
                await self.store.write(functools.partial(self.store.put_sandbox, row))
            # A restart in the middle of a pause or resume: the record says what was asked.
            with contextlib.suppress(SandboxError):
                if row.state == "paused" and not box.frozen:
                    await self.runtime.freeze(box)
                elif row.state == "running" and box.frozen:
                    await self.runtime.thaw(box)
            self._sandboxes[row.sandbox_id] = sandbox
        for box in boxes.values():  # warm-pool leftovers and boots that never got a record
            log.info("sandbox %s has no record: killing it", box.id)
            try:
                await self.runtime.kill(box)
            except SandboxError:  # one stuck leftover must not keep sandboxd from serving
                log.exception("sandbox %s: removing the leftover left something", box.id)

    # Create

    async def create(self, spec: CreateSpec) -> Sandbox:
        """Boot (or take a warm) sandbox of the template, /init it, record it.

        Raises:
            RequestError: 404 unknown template; 500 unusable template; 503 the sandbox did not
                come up (nothing of it is left).
        """
        template = self.store.template(spec.template)
        if template is None:
            raise RequestError(404, f"template '{spec.template}' not found")
        box = await self._boot(template)
        # Times are set again once envd took /init; these keep the evictor off meanwhile.
        started = now_us()
        end = started + spec.timeout_s * 1_000_000
        row = SandboxRow(
            box.id, template.template_id, template.alias, "running", started, end, spec.timeout_s,
            spec.secure, spec.auto_pause, template.cpu_count, template.memory_mb,
            template.disk_size_mb, template.envd_version, spec.metadata, spec.env_vars,
            spec.options, box.uid_base,
        )  # fmt: skip
        sandbox = Sandbox(row, box, self.envd_token(box.id) if spec.secure else None)
        self._starting[box.id] = sandbox
        try:
            await self._init(sandbox)
        except BaseException:
            await self._kill_quietly(box)
            raise
        finally:
            self._starting.pop(box.id, None)
        row.started_at = now_us()
        row.end_at = row.started_at + spec.timeout_s * 1_000_000
        self._sandboxes[box.id] = sandbox
        await self.store.write(
            functools.partial(self.store.put_sandbox, row),
            functools.partial(self.store.add_event, row.started_at, box.id, "created"),
            functools.partial(self.store.count_spawn, template.template_id, row.started_at),
        )
        self._spawn(self._first_sample(sandbox))  # the first metrics point, without waiting 5 s
        return sandbox

    async def _boot(self, template: TemplateRow) -> Box:
        limits = template_limits(template)
        rootfs = Path(template.rootfs)
        disk_mb = template.disk_size_mb
        box = await self.pool.take(rootfs, limits, disk_mb)
        if box is not None:
            return box
        try:
            return await self.runtime.boot(new_sandbox_id(), rootfs, limits, disk_mb)
        except TemplateError as exc:
            raise RequestError(
                500, f"template '{template.template_id}' is unusable: {exc}"
            ) from exc
        except BootError as exc:
            raise RequestError(503, str(exc)) from exc
        except SandboxError as exc:
            raise RequestError(500, str(exc)) from exc

    async def _init(self, sandbox: Sandbox) -> None:
        """POST envd's /init as the orchestrator does, retrying until it answers 204; a 4xx
        other than 429 will not change with retries and ends it at once.

        Raises:
            RequestError: 503 when envd did not take it within INIT_DEADLINE_S; 413 or 400 when
                envd refused it (too large, or malformed).
        """
        deadline = time.monotonic() + INIT_DEADLINE_S
        last = "no answer"
        while time.monotonic() < deadline:
            body: dict[str, Any] = {
                "envVars": sandbox.row.env_vars,
                "defaultUser": DEFAULT_USER,
                "defaultWorkdir": DEFAULT_WORKDIR,
                "timestamp": rfc3339(now_us()),
            }
            if sandbox.token is not None:
                body["accessToken"] = sandbox.token
            try:
                status, answer = await self.envd.request(
                    sandbox.id, "POST", "/init", body=body, token=sandbox.token
                )
            except EnvdUnreachable as exc:
                last = str(exc)
            else:
                if status == 204:
                    return
                last = f"{status} {answer[:200].decode(errors='replace')}"
                if 400 <= status < 500 and status != 429:
                    raise RequestError(
                        413 if status == 413 else 400,
                        f"envd in sandbox {sandbox.id} refused /init: {last}",
                    )
            await asyncio.sleep(INIT_RETRY_S)
        raise RequestError(503, f"envd in sandbox {sandbox.id} did not take /init: {last}")

    async def _kill_quietly(self, box: Box) -> None:
        try:
            await self._end(box)
        except SandboxError:
            log.exception("sandbox %s: cleaning up after a failed create", box.id)

    async def _end(self, box: Box) -> None:
        """Remove the sandbox from the host, and sandboxd's own connections into it.

        Raises:
            SandboxError: the host could not remove everything (a retry continues).
        """
        await self.envd.forget(box.id)
        await self.runtime.kill(box)

    # Kill, pause, resume, connect, timeout

    def _existing(self, sandbox_id: str) -> Sandbox:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.dying:
            raise not_found(sandbox_id)
        return sandbox

    async def kill(self, sandbox_id: str, reason: str = "killed") -> bool:
        """Kill a running or paused sandbox; False when there is none.

        Raises:
            RequestError: 500 when the host could not remove everything (a retry continues).
        """
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            return False
        self._gone(sandbox_id)
        async with sandbox.lock:
            await self._remove(sandbox, reason)
        return True

    async def _remove(self, sandbox: Sandbox, reason: str) -> None:
        """The rest of a kill, under the sandbox's lock, once it is out of `_sandboxes` (the
        API and the proxy no longer see it): the host's teardown, then the row. A teardown that
        fails puts the sandbox back as dying, so that a retried kill (or the evictor) continues
        it; the row stays until the host is clean.

        Raises:
            RequestError: 500 when the host could not remove everything.
        """
        try:
            await self._end(sandbox.box)
        except SandboxError as exc:
            sandbox.dying = True
            self._sandboxes.setdefault(sandbox.id, sandbox)
            self._evict_again_in(sandbox.id, EXPIRE_RETRY_S)  # a DELETE may come sooner
            raise RequestError(500, f"killing {sandbox.id}: {exc}") from exc
        await self.store.write(
            functools.partial(self.store.delete_sandbox, sandbox.id),
            functools.partial(self.store.add_event, now_us(), sandbox.id, reason),
        )

    async def pause(self, sandbox_id: str) -> None:
        """Freeze a running sandbox: processes and memory kept, no CPU, no answers.

        Raises:
            RequestError: 404 unknown; 409 already paused; 500 the freeze failed.
        """
        sandbox = self._existing(sandbox_id)
        async with sandbox.lock:
            self._existing(sandbox_id)  # killed while this waited for the lock?
            await self._pause(sandbox)

    async def _pause(self, sandbox: Sandbox) -> None:
        """`pause` under the sandbox's lock."""
        if not sandbox.running:
            raise RequestError(409, f"Sandbox {sandbox.id} is already paused")
        sandbox.row.state = "paused"  # listed as paused while pausing, as the reference
        self._gone(sandbox.id)
        try:
            await self.runtime.freeze(sandbox.box)
        except SandboxError as exc:
            sandbox.row.state = "running"
            raise RequestError(500, f"pausing {sandbox.id}: {exc}") from exc
        sandbox.row.end_at = now_us()
        await self.store.write(
            functools.partial(self.store.put_sandbox, sandbox.row),
            functools.partial(self.store.add_event, sandbox.row.end_at, sandbox.id, "paused"),
        )

    async def resume(self, sandbox_id: str, timeout_s: int) -> Sandbox:
        """Thaw a paused sandbox for `timeout_s` (POST /sandboxes/{id}/resume).

        Raises:
            RequestError: 404 unknown; 409 already running; 500 the thaw failed.
        """
        sandbox = self._existing(sandbox_id)
        async with sandbox.lock:
            self._existing(sandbox_id)
            if sandbox.running:
                raise RequestError(409, f"Sandbox {sandbox_id} is already running")
            await self._thaw(sandbox, timeout_s)
        return sandbox

    async def connect(self, sandbox_id: str, timeout_s: int) -> tuple[Sandbox, bool]:
        """Resume a paused sandbox, or extend a running one's end (never shorten it).
        Returns the sandbox and whether it was resumed.

        Raises:
            RequestError: 404 unknown; 500 the thaw failed.
        """
        sandbox = self._existing(sandbox_id)
        async with sandbox.lock:
            self._existing(sandbox_id)
            if not sandbox.running:
                await self._thaw(sandbox, timeout_s)
                return sandbox, True
            row = sandbox.row
            cap = row.started_at + self.max_timeout_s * 1_000_000
            row.end_at = max(row.end_at, min(now_us() + timeout_s * 1_000_000, cap))
            await self.store.write(functools.partial(self.store.put_sandbox, row))
        return sandbox, False

    async def _thaw(self, sandbox: Sandbox, timeout_s: int) -> None:
        try:
            await self.runtime.thaw(sandbox.box)
        except SandboxError as exc:
            raise RequestError(500, f"resuming {sandbox.id}: {exc}") from exc
        try:
            # A thawed envd still has everything /init gave it; sending it again (the same env
            # vars, token and user) is idempotent and restores an envd that restarted.
            await self._init(sandbox)
        except RequestError:
            # Still paused as far as anyone was told: frozen again (no CPU, no TTL to miss),
            # and the next resume tries again.
            with contextlib.suppress(SandboxError):
                await self.runtime.freeze(sandbox.box)
            raise
        row = sandbox.row
        row.state = "running"
        row.started_at = now_us()
        row.end_at = row.started_at + timeout_s * 1_000_000
        await self.store.write(
            functools.partial(self.store.put_sandbox, row),
            functools.partial(self.store.add_event, row.started_at, sandbox.id, "resumed"),
        )

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        """endAt = now + timeout, clamped to the max length from the last start.

        Raises:
            RequestError: 404 unknown or paused; 400 the max length is used up.
        """
        sandbox = self._existing(sandbox_id)
        if not sandbox.running:
            raise not_found(sandbox_id)  # paused ones are not live: the reference answers 404
        row = sandbox.row
        now = now_us()
        left = row.started_at + self.max_timeout_s * 1_000_000 - now
        if left <= 0:
            raise RequestError(400, f"Sandbox {sandbox_id} reached its maximum length")
        row.end_at = now + min(timeout_s * 1_000_000, left)
        await self.store.write(functools.partial(self.store.put_sandbox, row))

    # Background: the evictor and the metrics sampler

    async def _evict_loop(self) -> None:
        """At endAt: kill, or pause when autoPause (the reference polls every 50 ms too); and
        kills that stopped halfway, again."""
        while True:
            await asyncio.sleep(EVICT_POLL_S)
            now = now_us()
            for sandbox in list(self._sandboxes.values()):
                row = sandbox.row
                ended = sandbox.running and row.end_at <= now
                if (ended or sandbox.dying) and row.sandbox_id not in self._expiring:
                    self._expiring.add(row.sandbox_id)
                    self._spawn(self._expire(sandbox))

    async def _expire(self, sandbox: Sandbox) -> None:
        retry_in = 0.0
        try:
            async with sandbox.lock:
                # Looked at again under the lock: a connect or set_timeout since the evictor's
                # look may have moved the end, and a pause or kill may have come first.
                row = sandbox.row
                if self._sandboxes.get(sandbox.id) is not sandbox:
                    return
                if sandbox.dying:  # a kill that stopped halfway: carry on with it
                    self._sandboxes.pop(sandbox.id)
                    await self._remove(sandbox, "killed")
                    return
                if not sandbox.running or row.end_at > now_us():
                    return
                if row.auto_pause:
                    await self._pause(sandbox)
                    return
                self._sandboxes.pop(sandbox.id)
                self._gone(sandbox.id)
                await self._remove(sandbox, "expired")
        except RequestError as exc:
            # Again later, not at every poll: a mount that will not go fails the same way 20
            # times a second.
            retry_in = EXPIRE_RETRY_S
            log.warning("sandbox %s at its end: %s (again in %g s)", sandbox.id, exc.message,
                        retry_in)  # fmt: skip
        finally:
            self._evict_again_in(sandbox.id, retry_in)

    def _evict_again_in(self, sandbox_id: str, seconds: float) -> None:
        """Keep the evictor off the sandbox for `seconds`."""
        self._expiring.add(sandbox_id)
        asyncio.get_running_loop().call_later(seconds, self._expiring.discard, sandbox_id)

    async def _sample_loop(self) -> None:
        """Every 5 s: each running sandbox's envd /metrics, and the running count. The requests
        are spread over the period, so that neither the envds' work nor sandboxd's comes in
        one burst (20 at once held /health back by several ms); the round's rows are written
        in one transaction."""
        while True:
            started = time.monotonic()
            try:
                await self._sample_round(started)
            except Exception:  # a store that is busy or full now: the next round tries again
                log.exception("sampling metrics")
            await asyncio.sleep(max(0.0, SAMPLE_EVERY_S - (time.monotonic() - started)))

    async def _sample_round(self, started: float) -> None:
        now_s = int(time.time())
        running = [s for s in self._sandboxes.values() if s.running]
        gap = SAMPLE_EVERY_S / max(1, len(running))
        async with asyncio.TaskGroup() as group:
            samples = []
            for i, sandbox in enumerate(running):
                await asyncio.sleep(max(0.0, started + i * gap - time.monotonic()))
                samples.append(group.create_task(self._sample(sandbox)))
        changes = [functools.partial(self.store.add_team_sample, now_s, len(running))]
        for sandbox, task in zip(running, samples, strict=True):
            sample = task.result()
            if sample is not None and sandbox.id in self._sandboxes:
                changes.append(functools.partial(self.store.add_metric, sandbox.id, sample))
        await self.store.write(*changes)

    async def _first_sample(self, sandbox: Sandbox) -> None:
        sample = await self._sample(sandbox)
        if sample is not None and sandbox.id in self._sandboxes:
            await self.store.write(functools.partial(self.store.add_metric, sandbox.id, sample))

    async def _sample(self, sandbox: Sandbox) -> MetricSample | None:
        """The sandbox's envd /metrics now; None when it did not answer in time."""
        try:
            status, body = await self.envd.request(
                sandbox.id, "GET", "/metrics", token=sandbox.token, timeout_s=SAMPLE_TIMEOUT_S
            )
            if status != 200:
                raise EnvdUnreachable(f"/metrics answered {status}")
            return metric_sample(json.loads(body))
        except (EnvdUnreachable, ValueError, KeyError, TypeError) as exc:
            log.debug("sandbox %s: no metrics sample: %s", sandbox.id, exc)
            return None


def metric_sample(m: dict[str, Any]) -> MetricSample:
    """envd's /metrics answer as a stored sample."""
    return MetricSample(
        int(m["ts"]), int(m["cpu_count"]), float(m["cpu_used_pct"]), int(m["mem_used"]),
        int(m["mem_total"]), int(m["mem_cache"]), int(m["disk_used"]), int(m["disk_total"]),
    )  # fmt: skip
