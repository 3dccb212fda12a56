"""Many sandboxes at once on one `sandboxd serve`: memory per idle sandbox (its memory cgroup's
charge, and what it consists of: anonymous memory, page cache, kernel memory, and the PSS of
each of its processes; target <= 80 MiB) and sandboxd's `GET /health` p99 while they are created
and while they idle (target < 20 ms), against the same server with no sandbox (baseline).

/health is asked by a thread of its own with a blocking client, 50 times a second; the creates
go --at-once at a time (the machine has two cores: more in flight only spreads the wait). On a
busy machine much of a slow /health is the probe's own thread waiting for a CPU, so each one's
run-queue wait (/proc/thread-self/schedstat) is also subtracted in a second figure; and
sandboxd's CPU time (user and system) per second of each phase is the load-insensitive measure
of its own work.
Run as root: .venv/bin/python -m bench.sandboxd_fleet [--count 20] [--at-once 4] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import httpx

from bench.sandboxd_lifecycle import parse_args, percentile, scratch
from sandboxd.host.cgroups import CgroupHost
from tests.sandboxd.serving import NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator

MIB = 1 << 20
HEALTH_EVERY_S = 0.02
SETTLE_S = 10
IDLE_PROBE_S = 10
TIMEOUT_S = 300
START = "/process.Process/Start"


@dataclass(frozen=True)
class Created:
    sandbox_id: str
    token: str | None


async def create_sandbox(api: httpx.AsyncClient) -> Created:
    """The create step over plain HTTP, secure as the SDK's default (bench.sandboxd_lifecycle
    times the SDK's own create; here many run at once from one event loop)."""
    response = await api.post(
        "/sandboxes", json={"templateID": "base", "timeout": TIMEOUT_S, "secure": True}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return Created(body["sandboxID"], body.get("envdAccessToken"))


def envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return b"\0" + struct.pack(">I", len(payload)) + payload


def messages(body: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(flags, JSON message) of each whole Connect envelope in a stream body."""
    at = 0
    while at + 5 <= len(body):
        flags, size = body[at], struct.unpack(">I", body[at + 1 : at + 5])[0]
        if at + 5 + size > len(body):  # a stream cut short (its sandbox killed)
            return
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
    response = await envd.post(START, content=envelope(request), headers=headers)
    assert response.status_code == 200, response.text
    ends = [m["event"]["end"] for flags, m in messages(response.content)
            if not flags & 2 and "end" in m.get("event", {})]  # fmt: skip
    assert [end.get("status") for end in ends] == ["exit status 0"], response.content


@dataclass
class HealthProbe:
    """GET /health in a loop on its own thread; latencies go to the current phase."""

    url: str
    server_pid: int
    # (latency, latency less the probe thread's run-queue wait) per request, by phase
    phases: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    # sandboxd's CPU seconds and the time at the start of each phase
    cpu_marks: list[tuple[str, float, float]] = field(default_factory=list)
    phase: str = "baseline"
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10) as client, open("/proc/thread-self/schedstat") as sched:
            while not self._stop.is_set():
                waited = run_queue_s(sched)
                begin = time.monotonic()
                status = client.get(self.url + "/health").status_code
                took = time.monotonic() - begin
                waited = run_queue_s(sched) - waited
                self.phases[self.phase].append((took, took - waited))
                assert status == 204, status
                time.sleep(HEALTH_EVERY_S)

    def enter(self, phase: str) -> None:
        self.cpu_marks.append((phase, _cpu_s(self.server_pid), time.monotonic()))
        self.phase = phase

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self.cpu_marks.append(("end", _cpu_s(self.server_pid), time.monotonic()))
        self._stop.set()

    def cpu_per_s(self) -> dict[str, float]:
        """sandboxd's CPU milliseconds per second of each phase."""
        return {
            phase: (cpu_end - cpu) * 1000 / (end - at)
            for (phase, cpu, at), (_, cpu_end, end) in itertools.pairwise(self.cpu_marks)
        }


@contextlib.contextmanager
def probed_server(template: Path, prefix: str) -> Iterator[tuple[Sandboxd, HealthProbe]]:
    """A `sandboxd serve` on a scratch state directory, its /health probed (phase "baseline")
    from its start until `probe.stop()` or the end of the block."""
    with scratch(prefix) as work:
        server = Sandboxd(work / "state", template, NO_NETWORK)
        try:
            server.start()
            probe = HealthProbe(server.url, server.pid)
            probe.enter("baseline")
            thread = threading.Thread(target=probe.run, daemon=True)
            thread.start()
            try:
                yield server, probe
            finally:
                probe.stop()
                thread.join()
        finally:
            server.clean_up()


def run_queue_s(sched: TextIO) -> float:
    """The calling thread's time spent waiting for a CPU so far (schedstat's second field)."""
    sched.seek(0)
    return int(sched.read().split()[1]) / 1e9


def _cpu_s(pid: int) -> float:
    """User and system time of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def memory_of(server: Sandboxd, sandbox_id: str) -> dict[str, int]:
    """The sandbox's memory cgroup: its charge and the charge's parts, in bytes."""
    host = CgroupHost.detect()
    if host.pure_v2:
        cgroup = host.unified / server.cgroup_parent / sandbox_id
        stat = _stat(cgroup / "memory.stat")
        charged = int((cgroup / "memory.current").read_text())
        return {"charged": charged, "anon": stat["anon"], "file": stat["file"],
                "kernel": stat["kernel"], "shmem": stat["shmem"]}  # fmt: skip
    cgroup = host.v1["memory"] / server.cgroup_parent / sandbox_id
    stat = _stat(cgroup / "memory.stat")
    charged = int((cgroup / "memory.usage_in_bytes").read_text())
    anon, cache = stat["total_rss"], stat["total_cache"]
    # v1 charges kernel memory (page tables, slab, sockets) to usage_in_bytes too.
    return {"charged": charged, "anon": anon, "file": cache, "kernel": charged - anon - cache,
            "shmem": stat["total_shmem"]}  # fmt: skip


def pss_by_process(server: Sandboxd, sandbox_id: str) -> dict[str, int]:
    """Proportional set size of each process of the sandbox by name, in bytes."""
    found: dict[str, int] = defaultdict(int)
    for pid in server.cgroups(sandbox_id).pids():
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        pss = next(line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:"))
        found[comm] += int(pss) * 1024
    return found


async def create_fleet(server: Sandboxd, count: int, at_once: int) -> list[str]:
    limit = asyncio.Semaphore(at_once)
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=120) as api:

        async def one() -> str:
            async with limit:
                sandbox = await create_sandbox(api)
                await run_true(api, sandbox)
                return sandbox.sandbox_id

        return list(await asyncio.gather(*(one() for _ in range(count))))


def mean_mib(values: list[int]) -> str:
    return f"{statistics.mean(values) / MIB:.1f}"


def report(probe: HealthProbe, memory: list[dict[str, int]], pss: list[dict[str, int]]) -> None:
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    cpu = probe.cpu_per_s()
    for phase, samples in probe.phases.items():
        ms = [s[0] * 1000 for s in samples]
        own = [s[1] * 1000 for s in samples]
        print(f"GET /health {phase:9}: p50 {statistics.median(ms):6.2f} ms, "
              f"p99 {percentile(ms, 0.99):6.2f} ms, max {max(ms):7.2f} ms (n={len(ms)}); "
              f"less the probe's run-queue wait: p99 {percentile(own, 0.99):6.2f} ms; "
              f"sandboxd CPU {cpu[phase]:5.1f} ms/s")  # fmt: skip
    print(f"memory per idle sandbox, mean of {len(memory)} (MiB):")
    for part in memory[0]:
        values = [m[part] for m in memory]
        print(f"  {part:8} {mean_mib(values):>6}  (min {min(values) / MIB:.1f}, "
              f"max {max(values) / MIB:.1f})")  # fmt: skip
    names = sorted({name for p in pss for name in p}, key=lambda n: -sum(p[n] for p in pss))
    print("PSS per process, mean per sandbox (MiB): " + ", ".join(
        f"{name} {sum(p.get(name, 0) for p in pss) / len(pss) / MIB:.1f}" for name in names
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--at-once", type=int, default=4)
    args, template = parse_args(parser)
    with probed_server(template, "sandboxd-fleet-") as (server, probe):
        time.sleep(IDLE_PROBE_S)
        probe.enter("creating")
        ids = asyncio.run(create_fleet(server, args.count, args.at_once))
        probe.enter("settling")
        time.sleep(SETTLE_S)
        probe.enter(f"{args.count} idle")
        time.sleep(IDLE_PROBE_S)
        probe.stop()
        memory = [memory_of(server, i) for i in ids]
        pss = [pss_by_process(server, i) for i in ids]
    report(probe, memory, pss)


if __name__ == "__main__":
    main()
