"""The metrics sampler: every SAMPLE_EVERY_S, each running sandbox's envd /metrics and each
team's running count, stored for `GET /sandboxes/{id}/metrics` and the teams' metrics."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from sandboxd.errors import StoreUnavailable
from sandboxd.guest.client import EnvdUnreachable
from sandboxd.guest.metrics import metrics
from sandboxd.store.rows import MetricSample

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.guest.client import EnvdClient
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.lifecycle.sampler")

SAMPLE_EVERY_S = 5
# The reference gives envd 100 ms; a Python envd on a busy host needs more now and then.
SAMPLE_TIMEOUT_S = 1


class MetricsSampler:
    """Samples the sandboxes `running()` lists; a sample is kept only while `alive(id)`."""

    def __init__(
        self,
        store: Store,
        envd: EnvdClient,
        running: Callable[[], list[Sandbox]],
        alive: Callable[[str], bool],
    ) -> None:
        self.store = store
        self.envd = envd
        self._running = running
        self._alive = alive

    async def run(self) -> None:
        """Sample forever. The requests are spread over the period, so that neither the envds'
        work nor sandboxd's comes in one burst (20 at once held /health back by several ms);
        a round's rows are written in one transaction."""
        while True:
            started = time.monotonic()
            try:
                await self._round(started)
            except StoreUnavailable as exc:  # the database server is away: said, not traced
                log.warning("sampling metrics: %s", exc)
            except Exception:  # a store that is busy or full now: the next round tries again
                log.exception("sampling metrics")
            await asyncio.sleep(max(0.0, SAMPLE_EVERY_S - (time.monotonic() - started)))

    async def _round(self, started: float) -> None:
        now_s = int(time.time())
        running = self._running()
        gap = SAMPLE_EVERY_S / max(1, len(running))
        async with asyncio.TaskGroup() as group:
            samples = []
            for i, sandbox in enumerate(running):
                await asyncio.sleep(max(0.0, started + i * gap - time.monotonic()))
                samples.append(group.create_task(self._sample(sandbox)))
        per_team = Counter(s.row.team_id for s in running)
        changes: list[Callable[[], None]] = [functools.partial(self.store.add_team_sample, now_s, per_team[t.team_id],
                                     t.team_id) for t in self.store.teams()]  # fmt: skip
        for sandbox, task in zip(running, samples, strict=True):
            sample = task.result()
            if sample is not None and self._alive(sandbox.id):
                changes.append(self._adding(sandbox, sample))
        await self.store.write(*changes)

    def _adding(self, sandbox: Sandbox, sample: MetricSample) -> Callable[[], None]:
        return functools.partial(self.store.add_metric, sandbox.id, sample, sandbox.row.team_id)

    async def first(self, sandbox: Sandbox) -> None:
        """A new sandbox's first point, without waiting for the next round."""
        sample = await self._sample(sandbox)
        if sample is not None and self._alive(sandbox.id):
            await self.store.write(self._adding(sandbox, sample))

    async def _sample(self, sandbox: Sandbox) -> MetricSample | None:
        """The sandbox's envd /metrics now; None when it did not answer in time."""
        try:
            answer = await metrics(
                self.envd, sandbox.id, token=sandbox.token, timeout_s=SAMPLE_TIMEOUT_S
            )
            return metric_sample(answer)
        except (EnvdUnreachable, ValueError, KeyError, TypeError) as exc:
            log.debug("sandbox %s: no metrics sample: %s", sandbox.id, exc)
            return None


def metric_sample(m: dict[str, Any]) -> MetricSample:
    """envd's /metrics answer as a stored sample."""
    return MetricSample(
        int(m["ts"]), int(m["cpu_count"]), float(m["cpu_used_pct"]), int(m["mem_used"]),
        int(m["mem_total"]), int(m["mem_cache"]), int(m["disk_used"]), int(m["disk_total"]),
    )  # fmt: skip
