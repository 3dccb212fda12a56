"""sandboxd's runtime on its own: boot (to envd /health 204), freeze, thaw and kill latency, and
memory per idle sandbox (the memory cgroup's charge, nspawn included), from the base template.
Boots alternate between a disk of --disk-mb and no disk limit, so the disk's create cost is
their difference in one run; each boot also gives the size of its upper directory and of its
disk image on the host after the boot.

Each boot also gives its CPU time (the whole sandbox's cgroup when envd first answers, nspawn
included: the figure a busy machine does not change much) and its timeline from the container's
own systemd (whose monotonic clock is the host's): when PID 1 started, when envd's process
started and when envd reported READY=1, counted from the start of the boot.

Run as root: .venv/bin/python -m bench.sandbox_runtime [--runs 10] [--idle 3] [--disk-mb 10240]
[--template DIR]
(without --template it builds or reuses the test suite's cached base template).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.nspawn.steps import SandboxDirs
from sandboxd.runtime.spec import BootImage

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from sandboxd.runtime.nspawn.box import NspawnBox

T = TypeVar("T")

MIB = 1 << 20


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


async def _timed(samples: list[float], step: Awaitable[T]) -> T:
    begin = time.monotonic()
    result = await step
    samples.append(time.monotonic() - begin)
    return result


def _systemctl_show(box: NspawnBox, *args: str) -> dict[str, str]:
    out = subprocess.run(
        ["nsenter", "-t", str(box.leader_pid), "-a", "systemctl", "show", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.split())


def boot_timeline(box: NspawnBox, started: float) -> dict[str, float]:
    """Seconds from `started` (time.monotonic()) to PID 1's start, envd's exec and envd's
    READY=1, as the container's systemd recorded them."""
    manager = _systemctl_show(box, "-p", "UserspaceTimestampMonotonic")
    envd = _systemctl_show(
        box, "envd.service", "-p", "ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic"
    )
    stamps = {
        "PID 1 started": manager["UserspaceTimestampMonotonic"],
        "envd started": envd["ExecMainStartTimestampMonotonic"],
        "envd ready": envd["ActiveEnterTimestampMonotonic"],
    }
    return {step: int(usec) / 1e6 - started for step, usec in stamps.items()}


def _allocated_kib(path: Path) -> float:
    """What `path` takes on its disk (du: allocated blocks, one filesystem)."""
    out = subprocess.run(["du", "-s", "-B1", "-x", str(path)], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return int(out.split()[0]) / 1024


async def lifecycle(
    rt: NspawnRuntime, template: Path, runs: int, disk_mb: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds per step, and KiB per boot (upper dir, disk image on the host)."""
    times: dict[str, list[float]] = {"boot": [], "boot, no disk limit": [], "boot CPU": [],
                                     "freeze": [], "thaw": [], "kill": []}  # fmt: skip
    sizes: dict[str, list[float]] = {"upper dir": [], "disk image": []}
    for run in range(runs * 2):
        limited = run % 2 == 0
        started = time.monotonic()
        boot = rt.boot(
            uuid.uuid4().hex[:16], BootImage((template,)), disk_mb=disk_mb if limited else 0
        )
        box = await _timed(times["boot" if limited else "boot, no disk limit"], boot)
        if not limited:
            await rt.kill(box)
            continue
        dirs = SandboxDirs(box.dir)
        sizes["upper dir"].append(_allocated_kib(dirs.upper))
        sizes["disk image"].append(_allocated_kib(dirs.disk_image))
        times["boot CPU"].append(rt.stats(box).cpu_usec / 1e6)
        for step, seconds in boot_timeline(box, started).items():
            times.setdefault(step, []).append(seconds)
        await _timed(times["freeze"], rt.freeze(box))
        await _timed(times["thaw"], rt.thaw(box))
        await _timed(times["kill"], rt.kill(box))
    return times, sizes


async def idle_memory(rt: NspawnRuntime, template: Path, count: int, settle_s: float) -> list[int]:
    boxes = [await rt.boot(uuid.uuid4().hex[:16], BootImage((template,))) for _ in range(count)]
    try:
        await asyncio.sleep(settle_s)
        return [rt.stats(box).memory_bytes for box in boxes]
    finally:
        for box in boxes:
            await rt.kill(box)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--idle", type=int, default=3, help="sandboxes idling together")
    parser.add_argument("--disk-mb", type=int, default=10240)
    parser.add_argument("--template", type=Path)
    args = parser.parse_args()
    if args.template is None:
        from tests.sandboxd.template_cache import ensure_base_template

        args.template = ensure_base_template()
    with tempfile.TemporaryDirectory(prefix="sandboxd-bench-") as state:
        rt = NspawnRuntime(
            Path(state) / "sandboxes",
            cgroup_parent=f"sandboxd-bench-{uuid.uuid4().hex}",
            probe=envd_ready,
            guest_unit=ENVD_UNIT,
        )
        try:
            times, sizes = await lifecycle(rt, args.template, args.runs, args.disk_mb)
            memory = await idle_memory(rt, args.template, args.idle, settle_s=5)
        finally:
            for mount in {rt.host.unified, *rt.host.v1.values()}:
                (mount / rt.cgroup_parent).rmdir()
    for step, samples in times.items():
        print(f"{step:19} {_ms(samples)} over {len(samples)}")
    for what, kib in sizes.items():
        print(f"{what} after boot (KiB): median {statistics.median(kib):.0f}, max {max(kib):.0f}")
    per_box = ", ".join(f"{m / MIB:.1f}" for m in memory)
    print(f"idle memory per sandbox (MiB, {args.idle} together, after 5 s): {per_box}")


if __name__ == "__main__":
    asyncio.run(main())
