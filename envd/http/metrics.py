"""GET /metrics: the sandbox's CPU, memory and disk usage, in the reference envd's field names,
order and units (api/metrics.go + host/metrics.go)."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final

import psutil  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from envd.http import cgroup
from envd.http.cgroup import CpuMeter

if TYPE_CHECKING:
    from starlette.requests import Request

log = logging.getLogger("envd.metrics")

MIB: Final = 1 << 20
MEMINFO_PATH: Final = "/proc/meminfo"


@dataclass(frozen=True, slots=True)
class Metrics:
    """One /metrics answer; field order is the JSON order clients see."""

    ts: int
    cpu_count: int
    cpu_used_pct: float
    mem_total_mib: int
    mem_used_mib: int
    mem_total: int
    mem_used: int
    mem_cache: int
    disk_used: int
    disk_total: int


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per field (the file says kB and means KiB)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def memory_bytes(meminfo: dict[str, int]) -> tuple[int, int, int]:
    """(total, used, cache) as the reference computes them (gopsutil's VirtualMemory)."""
    total = meminfo["MemTotal"]
    cache = meminfo["Cached"] + meminfo.get("SReclaimable", 0)
    used = total - meminfo["MemFree"] - meminfo["Buffers"] - cache
    return total, used, cache


def disk_bytes(path: str = "/") -> tuple[int, int]:
    """(used, total) of the filesystem at `path`; reserved blocks count as used, as in Go."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bavail) * st.f_bsize, st.f_blocks * st.f_bsize


_CPU = CpuMeter()


def collect() -> Metrics:
    """Sample the sandbox now: the machine's memory and CPUs, or the limits and use of its
    cgroup where it is a container with limits (envd.http.cgroup); the disk of its `/` (a
    container's overlay answers with its own disk). CPU use is measured since the previous
    call (psutil, or CpuMeter, keeps that).

    Raises:
        OSError, KeyError, ValueError: /proc or statfs unreadable or unexpected.
    """
    with open(MEMINFO_PATH) as f:
        mem_total, mem_used, mem_cache = memory_bytes(parse_meminfo(f.read()))
    if (limited := cgroup.memory(mem_total)) is not None:
        mem_total, mem_used, mem_cache = limited.total, limited.used, limited.cache
    disk_used, disk_total = disk_bytes()
    if (cpus := _CPU.count()) is not None:
        cpu_used_pct = _CPU.used_pct(cpus)
    else:
        cpus, cpu_used_pct = os.cpu_count() or 1, psutil.cpu_percent(interval=None)
    return Metrics(
        ts=int(time.time()),
        cpu_count=cpus,
        cpu_used_pct=round(cpu_used_pct, 2),
        mem_total_mib=mem_total // MIB,
        mem_used_mib=mem_used // MIB,
        mem_total=mem_total,
        mem_used=mem_used,
        mem_cache=mem_cache,
        disk_used=disk_used,
        disk_total=disk_total,
    )


async def metrics(_: Request) -> Response:
    try:
        sample = collect()
    except (OSError, KeyError, ValueError) as exc:
        log.error("cannot collect metrics: %s", exc)
        return Response(status_code=500)  # the reference answers an empty 500
    return Response(
        json.dumps(asdict(sample), separators=(",", ":")) + "\n",
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def routes() -> list[BaseRoute]:
    # The first answer reports CPU use since start-up: psutil measures from its previous call.
    psutil.cpu_percent(interval=None)
    if (cpus := _CPU.count()) is not None:
        _CPU.used_pct(cpus)
    return [Route("/metrics", metrics, methods=["GET"])]
