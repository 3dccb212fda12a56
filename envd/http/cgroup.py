"""The memory and CPU a container's cgroup gives it, for /metrics: inside a sandbox that is a
container (sandboxd's), /proc/meminfo and the CPU count are the host's, and the SDK's
`get_metrics()` would show a 1 GiB sandbox with the host's 24 GiB. The container sees its own
cgroup at the root of each hierarchy under /sys/fs/cgroup (cgroup2 alone, or v1 controllers).
In a VM (or on a host) no limit is set there, and /metrics reports the machine as before.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
# v1 reports "no limit" as the largest page-aligned counter; anything this large is none.
NO_LIMIT_ABOVE: Final = 1 << 60


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    total: int  # the limit
    used: int  # charged, less the page cache the kernel can drop first (inactive files)
    cache: int


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _stat(path: Path) -> dict[str, int]:
    text = _read(path) or ""
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if " " in line)}


def _v2(name: str) -> Path | None:
    """A file of the cgroup2 hierarchy when it is the only one (a pure cgroup2 system)."""
    path = CGROUP_ROOT / name
    return path if (CGROUP_ROOT / "cgroup.controllers").exists() else None


def memory(machine_total: int) -> CgroupMemory | None:
    """The container's memory, or None when its limit is not below `machine_total`."""
    if (limit_file := _v2("memory.max")) is not None:
        limit, usage = _read(limit_file), _read(CGROUP_ROOT / "memory.current")
        stat = _stat(CGROUP_ROOT / "memory.stat")
        inactive, cache = stat.get("inactive_file", 0), stat.get("file", 0)
    else:
        v1 = CGROUP_ROOT / "memory"
        limit, usage = _read(v1 / "memory.limit_in_bytes"), _read(v1 / "memory.usage_in_bytes")
        stat = _stat(v1 / "memory.stat")
        inactive, cache = stat.get("total_inactive_file", 0), stat.get("total_cache", 0)
    if limit is None or usage is None or not limit.isdigit():  # "max": none
        return None
    total = int(limit)
    if total >= min(machine_total, NO_LIMIT_ABOVE):
        return None
    return CgroupMemory(total, max(0, int(usage) - inactive), cache)


def _quota() -> float | None:
    """CPUs of quota (quota / period), or None for none."""
    if (cpu_max := _v2("cpu.max")) is not None:
        quota, _, period = (_read(cpu_max) or "max").partition(" ")
    else:
        quota = _read(CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us") or "-1"
        period = _read(CGROUP_ROOT / "cpu" / "cpu.cfs_period_us") or "0"
    if not quota.lstrip("-").isdigit() or int(quota) <= 0 or not period.isdigit():
        return None
    return int(quota) / int(period) if int(period) else None


def _usage_ns() -> int | None:
    """CPU time the container has used, in ns."""
    if (cpu_stat := _v2("cpu.stat")) is not None:
        usec = _stat(cpu_stat).get("usage_usec")
        return None if usec is None else usec * 1000
    text = _read(CGROUP_ROOT / "cpuacct" / "cpuacct.usage")
    return int(text) if text and text.isdigit() else None


class CpuMeter:
    """The container's CPU count (its quota, rounded up) and use since the previous call, in
    percent of that count; None where no quota is set."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None

    def count(self) -> int | None:
        quota = _quota()
        if quota is None:
            return None
        return max(1, min(os.cpu_count() or 1, math.ceil(quota)))

    def used_pct(self, cpus: int) -> float:
        usage, now = _usage_ns(), time.monotonic()
        if usage is None:
            return 0.0
        last, self._last = self._last, (now, usage)
        if last is None or now <= last[0]:
            return 0.0
        return min(100.0, 100 * (usage - last[1]) / ((now - last[0]) * 1e9 * cpus))
