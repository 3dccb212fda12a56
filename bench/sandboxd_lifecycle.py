"""sandboxd's lifecycle as a client sees it, through a real `sandboxd serve` (plain HTTP, an API
key): create → first command done, p50/p95, cold (no warm pool; target <= 1.5 s) and from a
warm pool (`--pool N`; target <= 150 ms), interleaved round by round on two servers; and the
pause, resume (connect) and kill latency of the cold sandboxes.

"First command" is what `commands.run("true")` of the SDK does: Process/Start of
`/bin/bash -l -c true` through sandboxd's proxy, read to its end event. Each pool create waits
first until the pool is full again (a create that finds it empty is a cold one). The boot's
share of a cold create comes from sandboxd's log ("up in").

Run as root: .venv/bin/python -m bench.sandboxd_lifecycle [--runs 50] [--pool 2] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from sandboxd.cgroups import CgroupHost
from sandboxd.health import health_status
from sandboxd.removal import remove_tree
from tests.sandboxd.serving import Sandboxd

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterator

TIMEOUT_S = 300
START = "/process.Process/Start"


@dataclass(frozen=True)
class Created:
    sandbox_id: str
    token: str | None


async def create_sandbox(api: httpx.AsyncClient) -> Created:
    """The create step, secure as the SDK's default. The one call to swap for the SDK's
    `Sandbox.create` once sandboxd serves its v2 create."""
    response = await api.post(
        "/sandboxes", json={"templateID": "base", "timeout": TIMEOUT_S, "secure": True}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return Created(body["sandboxID"], body.get("envdAccessToken"))


def _envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return b"\0" + struct.pack(">I", len(payload)) + payload


def _messages(body: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(flags, JSON message) of each Connect envelope in a whole stream body."""
    at = 0
    while at + 5 <= len(body):
        flags, size = body[at], struct.unpack(">I", body[at + 1 : at + 5])[0]
        yield flags, json.loads(body[at + 5 : at + 5 + size] or b"{}")
        at += 5 + size


async def run_true(envd: httpx.AsyncClient, sandbox: Created) -> None:
    """`commands.run("true")` as the SDK sends it, through the proxy; returns after its end
    event (exit status 0) and the stream's end."""
    headers = {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "E2b-Sandbox-Port": "49983",
        "Content-Type": "application/connect+json",
        "Authorization": "Basic dXNlcjo=",  # user "user", as the SDK sends it
    }
    if sandbox.token is not None:
        headers["X-Access-Token"] = sandbox.token
    request = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "true"], "envs": {}}}
    response = await envd.post(START, content=_envelope(request), headers=headers)
    assert response.status_code == 200, response.text
    ends = [m["event"]["end"] for flags, m in _messages(response.content)
            if not flags & 2 and "end" in m.get("event", {})]  # fmt: skip
    assert [end.get("status") for end in ends] == ["exit status 0"], response.content


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
        for entry in os.scandir(parent):
            if entry.is_dir() and entry.name not in live:
                try:
                    netns = server.netns(entry.name)
                except (LookupError, OSError):
                    continue
                try:
                    ready += await health_status(netns, timeout_s=0.5) == 204
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


async def one_round(cold: Sandboxd, warm: Sandboxd, pool: int, series: Series) -> None:
    async with (
        httpx.AsyncClient(base_url=cold.url, headers=cold.headers, timeout=60) as cold_api,
        httpx.AsyncClient(base_url=warm.url, headers=warm.headers, timeout=60) as warm_api,
    ):
        await pool_full(warm, pool, set())
        begin = time.monotonic()
        sandbox = await create_sandbox(cold_api)
        await run_true(cold_api, sandbox)
        series.cold.append(time.monotonic() - begin)
        series.cold_boot.append(boot_seconds(cold, sandbox.sandbox_id) or float("nan"))
        path = f"/sandboxes/{sandbox.sandbox_id}"
        paused = await timed(series.pause, cold_api.post(path + "/pause"))
        assert paused.status_code == 204, paused.text
        resumed = await timed(series.resume, cold_api.post(path + "/connect", json={"timeout": 60}))
        assert resumed.status_code == 201, resumed.text
        killed = await timed(series.kill, cold_api.delete(path))
        assert killed.status_code == 204, killed.text

        await pool_full(warm, pool, set())
        begin = time.monotonic()
        sandbox = await create_sandbox(warm_api)
        series.pool_create.append(time.monotonic() - begin)
        await run_true(warm_api, sandbox)
        series.pool.append(time.monotonic() - begin)
        assert (await warm_api.delete(f"/sandboxes/{sandbox.sandbox_id}")).status_code == 204


async def rounds(cold: Sandboxd, warm: Sandboxd, runs: int, pool: int) -> Series:
    series = Series()
    for _ in range(runs):
        await one_round(cold, warm, pool, series)
    return series


def report(series: Series, pool: int, load: tuple[float, float]) -> None:
    boots = [b for b in series.cold_boot if b == b]  # noqa: PLR0124  # NaN: not logged
    print(f"load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f}")
    print(f"create → first command, cold:        {p50_p95_ms(series.cold)}")
    print(f"  of which the boot (sandboxd's log): {p50_p95_ms(boots)}")
    print(f"create → first command, pool {pool}:      {p50_p95_ms(series.pool)}")
    print(f"  of which the create:                {p50_p95_ms(series.pool_create)}")
    print(f"pause:                               {p50_p95_ms(series.pause)}")
    print(f"resume (connect):                    {p50_p95_ms(series.resume)}")
    print(f"kill:                                {p50_p95_ms(series.kill)}")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pool", type=int, default=2)
    args, template = parse_args(parser)
    with scratch("sandboxd-lifecycle-") as work:
        cold = Sandboxd(work / "cold", template)
        warm = Sandboxd(work / "warm", template, "--pool", str(args.pool))
        try:
            cold.start()
            warm.start()
            load_before = os.getloadavg()[0]
            series = asyncio.run(rounds(cold, warm, args.runs, args.pool))
            load = (load_before, os.getloadavg()[0])
        finally:
            try:
                cold.clean_up()
            finally:
                warm.clean_up()
    report(series, args.pool, load)


if __name__ == "__main__":
    main()
