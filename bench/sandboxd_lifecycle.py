"""sandboxd's lifecycle as a client sees it, through a real `sandboxd serve`: create → first
command done, p50/p95, cold (no warm pool; target <= 1.5 s) and from a warm pool (`--pool N`;
target <= 150 ms), interleaved round by round on two servers; and the pause, resume (connect)
and kill latency of the cold sandboxes.

The create and the first command are the unmodified e2b Python SDK's, in normal mode:
`Sandbox.create()` against sandboxd's control API, then `commands.run("true")` through its proxy
(bench/sdk_creator.py, run with the SDK suite's virtualenv, tests/sdk/.venv: build it with
scripts/sdk-env). One untimed create per server comes first, so the SDK's own first-use costs
are not counted. Each pool create waits first until the pool is full again (a create that finds
it empty is a cold one). The boot's share of a cold create comes from sandboxd's log ("up in").
Pause, resume and kill go to the control API over plain HTTP.

With `--baseline DIR` (a checkout of another commit, e.g. `git worktree add ../baseline main~3`),
two more servers run that commit's sandboxd with this virtualenv, and each round measures both
commits one after the other: the tables of both, and this commit's p50s over the baseline's.

Run as root: .venv/bin/python -m bench.sandboxd_lifecycle [--runs 50] [--pool 2] [--template DIR]
             [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.sdk_process import SdkProcess
from sandboxd.guest.readiness import envd_ready
from sandboxd.host.cgroups import CgroupHost
from sandboxd.host.removal import remove_tree
from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterator


@dataclass(frozen=True)
class Created:
    sandbox_id: str
    create_s: float  # Sandbox.create()
    total_s: float  # Sandbox.create() → commands.run("true") done


class SdkCreator(SdkProcess):
    """The SDK client process (bench/sdk_creator.py): one create and first command per request."""

    def __init__(self, prefix: tuple[str, ...] = ()) -> None:
        super().__init__("sdk_creator.py", prefix)

    async def create(self, server: Sandboxd) -> Created:
        return await asyncio.to_thread(self._create, server.url)

    def _create(self, url: str) -> Created:
        sandbox_id, create_s, total_s = self.ask(url, API_KEY)
        return Created(sandbox_id, float(create_s), float(total_s))


async def timed(samples: list[float], step: Awaitable[Any]) -> Any:
    begin = time.monotonic()
    result = await step
    samples.append(time.monotonic() - begin)
    return result


def percentile(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def p50_p95_ms(samples: list[float]) -> str:
    return (f"p50 {statistics.median(samples) * 1000:7.1f} ms, "
            f"p95 {percentile(samples, 0.95) * 1000:7.1f} ms (n={len(samples)})")  # fmt: skip


async def pool_full(server: Sandboxd, size: int, live: set[str], timeout_s: float = 120) -> None:
    """Wait until `size` pool sandboxes (booted, not created) answer envd's /health."""
    deadline = time.monotonic() + timeout_s
    parent = CgroupHost.detect().unified / server.cgroup_parent
    while time.monotonic() < deadline:
        ready = 0
        try:
            entries = list(os.scandir(parent))
        except FileNotFoundError:  # the pool's first boot has not made the cgroup parent yet
            entries = []
        for entry in entries:
            if entry.is_dir() and entry.name not in live:
                try:
                    netns = server.netns(entry.name)
                except (LookupError, OSError):
                    continue
                try:
                    ready += await envd_ready(netns, timeout_s=0.5)
                finally:
                    netns.close()
        if ready >= size:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the warm pool did not refill to {size} in {timeout_s} s")


def boot_seconds(server: Sandboxd, sandbox_id: str) -> float | None:
    match = re.search(rf"sandbox {sandbox_id} up in ([\d.]+) s", server.log.read_text())
    return float(match.group(1)) if match else None


@dataclass
class Series:
    """Seconds per sample of each measured step."""

    cold: list[float] = field(default_factory=list)
    cold_boot: list[float] = field(default_factory=list)
    pool: list[float] = field(default_factory=list)
    pool_create: list[float] = field(default_factory=list)
    pause: list[float] = field(default_factory=list)
    resume: list[float] = field(default_factory=list)
    kill: list[float] = field(default_factory=list)


async def one_round(
    sdk: SdkCreator, cold: Sandboxd, warm: Sandboxd, pool: int, series: Series
) -> None:
    async with (
        httpx.AsyncClient(base_url=cold.url, headers=cold.headers, timeout=60) as cold_api,
        httpx.AsyncClient(base_url=warm.url, headers=warm.headers, timeout=60) as warm_api,
    ):
        await pool_full(warm, pool, set())
        sandbox = await sdk.create(cold)
        series.cold.append(sandbox.total_s)
        series.cold_boot.append(boot_seconds(cold, sandbox.sandbox_id) or float("nan"))
        path = f"/sandboxes/{sandbox.sandbox_id}"
        paused = await timed(series.pause, cold_api.post(path + "/pause"))
        assert paused.status_code == 204, paused.text
        resumed = await timed(series.resume, cold_api.post(path + "/connect", json={"timeout": 60}))
        assert resumed.status_code == 201, resumed.text
        killed = await timed(series.kill, cold_api.delete(path))
        assert killed.status_code == 204, killed.text

        await pool_full(warm, pool, set())
        sandbox = await sdk.create(warm)
        series.pool_create.append(sandbox.create_s)
        series.pool.append(sandbox.total_s)
        assert (await warm_api.delete(f"/sandboxes/{sandbox.sandbox_id}")).status_code == 204


async def rounds(pairs: list[tuple[Sandboxd, Sandboxd]], runs: int, pool: int) -> list[Series]:
    """`runs` rounds; in each, every (cold, warm) pair measured in turn."""
    sdk = SdkCreator()
    try:
        # Untimed: the SDK's first create in a process pays for its own imports and clients.
        for cold, warm in pairs:
            for server in (cold, warm):
                await pool_full(warm, pool, set())
                first = await sdk.create(server)
                async with httpx.AsyncClient(base_url=server.url, headers=server.headers) as api:
                    assert (await api.delete(f"/sandboxes/{first.sandbox_id}")).status_code == 204
        series = [Series() for _ in pairs]
        for _ in range(runs):
            for (cold, warm), each in zip(pairs, series, strict=True):
                await one_round(sdk, cold, warm, pool, each)
        return series
    finally:
        sdk.close()


def report(series: Series, pool: int) -> None:
    boots = [b for b in series.cold_boot if b == b]  # noqa: PLR0124  # NaN: not logged
    print(f"create → first command, cold:        {p50_p95_ms(series.cold)}")
    print(f"  of which the boot (sandboxd's log): {p50_p95_ms(boots)}")
    print(f"create → first command, pool {pool}:      {p50_p95_ms(series.pool)}")
    print(f"  of which Sandbox.create():         {p50_p95_ms(series.pool_create)}")
    print(f"pause:                               {p50_p95_ms(series.pause)}")
    print(f"resume (connect):                    {p50_p95_ms(series.resume)}")
    print(f"kill:                                {p50_p95_ms(series.kill)}")


def report_ratios(this: Series, baseline: Series) -> None:
    """This commit's p50 over the baseline's, step by step."""
    for name in ("cold", "pool", "pool_create", "pause", "resume", "kill"):
        ours, theirs = getattr(this, name), getattr(baseline, name)
        ratio = statistics.median(ours) / statistics.median(theirs)
        print(f"{name:12} p50 {ratio:5.3f}x the baseline's")


def parse_args(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, Path]:
    """Add --template, parse, and find the template: the given one, or the test suite's cached
    base template (built when missing)."""
    parser.add_argument("--template", type=Path)
    args = parser.parse_args()
    if args.template is not None:
        return args, args.template
    from tests.sandboxd.template_cache import ensure_base_template

    return args, ensure_base_template()


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A directory for state directories and logs, removed afterwards (mounts detached)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        remove_tree(work)


def servers(work: Path, template: Path, pool: int, tree: Path | None) -> tuple[Sandboxd, Sandboxd]:
    """A cold and a warm server of this checkout, or of the checkout `tree`: its sandboxd
    first on the path (`-P`: not this directory's)."""
    name = "this" if tree is None else "baseline"
    cold = Sandboxd(work / f"{name}-cold", template, NO_NETWORK)
    warm = Sandboxd(work / f"{name}-warm", template, NO_NETWORK, "--pool", str(pool))
    if tree is not None:
        for server in (cold, warm):
            server.command = [sys.executable, "-P", "-m", "sandboxd"]
            server.env = {"PYTHONPATH": str(tree.absolute())}
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit")
    args, template = parse_args(parser)
    with scratch("sandboxd-lifecycle-") as work, contextlib.ExitStack() as stack:
        pairs = [servers(work, template, args.pool, None)]
        if args.baseline is not None:
            pairs.append(servers(work, template, args.pool, args.baseline))
        for server in (s for pair in pairs for s in pair):
            stack.callback(server.clean_up)
            server.start()
        load_before = os.getloadavg()[0]
        series = asyncio.run(rounds(pairs, args.runs, args.pool))
        load_after = os.getloadavg()[0]
    print(f"load average (1 min) at start / end: {load_before:.1f} / {load_after:.1f}")
    report(series[0], args.pool)
    if args.baseline is not None:
        print(f"baseline ({args.baseline}):")
        report(series[1], args.pool)
        report_ratios(series[0], series[1])


if __name__ == "__main__":
    main()
