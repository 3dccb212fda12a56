"""B6: WatchDir latency (a child `touch` → the event at the client) over the spawn-and-touch
baseline measured in this run with a local inotify; a 10,000-create burst (complete, or an
explicit overflow error); RSS and fds after 1,000 watch streams opened and closed.

Run: .venv/bin/python -m bench.watch [--touches 200] [--burst 10000] [--streams 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from connectrpc.errors import ConnectError

from envd.filesystem import inotify
from tests.envd_process import start_envd
from tests.filesystem.watching import CREATE, watching

if TYPE_CHECKING:
    from tests.envd_process import EnvdProcess

log = logging.getLogger("bench.watch")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


async def baseline_touch_ms(directory: Path, touches: int) -> list[float]:
    """Spawn `touch` the same way and read the inotify event in this process: B6's floor."""
    loop = asyncio.get_running_loop()
    watcher = inotify.Inotify()
    readable = asyncio.Event()
    loop.add_reader(watcher.fd, readable.set)
    samples = []
    try:
        watcher.add_watch(str(directory), inotify.IN_CREATE)
        for i in range(touches):
            started = time.perf_counter()
            child = await asyncio.create_subprocess_exec("touch", str(directory / f"base-{i}"))
            while not watcher.read_events():
                readable.clear()
                await asyncio.wait_for(readable.wait(), 5)
            samples.append((time.perf_counter() - started) * 1000)
            await child.wait()
    finally:
        loop.remove_reader(watcher.fd)
        watcher.close()
    return samples


async def envd_touch_ms(envd: EnvdProcess, directory: Path, touches: int) -> list[float]:
    samples = []
    async with watching(envd.url, str(directory), binary=True) as stream:
        for i in range(touches):
            started = time.perf_counter()
            child = await asyncio.create_subprocess_exec("touch", str(directory / f"w-{i}"))
            while await stream.events(1) != [(f"w-{i}", CREATE)]:
                pass  # the previous touch's CHMOD (utimensat)
            samples.append((time.perf_counter() - started) * 1000)
            await child.wait()
    return samples


async def burst(envd: EnvdProcess, directory: Path, count: int) -> str:
    async with watching(envd.url, str(directory), binary=True) as stream:
        started = time.perf_counter()
        for i in range(count):
            os.close(os.open(directory / f"b-{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        try:
            events = await stream.events(count, timeout_s=60)
        except ConnectError as exc:
            return f"explicit error: {exc.message}"
        elapsed = time.perf_counter() - started
        names = [name for name, _ in events]
        lost = count - len(set(names))
        return f"{len(events)} events, {lost} lost, in order: {names == sorted(names, key=lambda n: int(n[2:]))}, {elapsed:.2f} s"


async def churn(envd: EnvdProcess, directory: Path, streams: int) -> tuple[int, int, int, int]:
    for _ in range(50):  # warm-up: first-use allocations are not leaks
        async with watching(envd.url, str(directory)):
            pass
    await asyncio.sleep(0.5)
    rss_before, fds_before = envd.rss_bytes(), envd.open_fds()
    for _ in range(streams):
        async with watching(envd.url, str(directory)):
            pass
    await asyncio.sleep(1)
    return rss_before, envd.rss_bytes(), fds_before, envd.open_fds()


async def run(args: argparse.Namespace, scratch: Path) -> None:
    envd = start_envd(scratch)
    try:
        for name in ("base", "touch", "burst", "churn"):
            (scratch / name).mkdir()
        ours, floor = [], []
        for _ in range(5):  # interleaved, so load drift hits both alike
            floor += await baseline_touch_ms(scratch / "base", args.touches // 5)
            ours += await envd_touch_ms(envd, scratch / "touch", args.touches // 5)
            for directory in (scratch / "base", scratch / "touch"):
                shutil.rmtree(directory)
                directory.mkdir()
        (p50, p99), (base50, base99) = _percentiles(ours), _percentiles(floor)
        log.info("| touch → event | p50 ms | p99 ms |")
        log.info("|---|---|---|")
        log.info("| baseline (spawn touch, local inotify) | %.2f | %.2f |", base50, base99)
        log.info("| envd WatchDir, proto client | %.2f | %.2f |", p50, p99)
        log.info("| overhead | %.2f | %.2f |", p50 - base50, p99 - base99)
        log.info("")
        log.info(
            "burst of %d creates: %s", args.burst, await burst(envd, scratch / "burst", args.burst)
        )
        rss0, rss1, fds0, fds1 = await churn(envd, scratch / "churn", args.streams)
        log.info(
            "%d streams opened and closed: RSS %.1f → %.1f MiB, open fds %d → %d",
            args.streams,
            rss0 / 2**20,
            rss1 / 2**20,
            fds0,
            fds1,
        )
    finally:
        envd.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--touches", type=int, default=200)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    scratch = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    try:
        asyncio.run(run(args, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
