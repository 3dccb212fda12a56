"""Noisy neighbours: what one sandbox's abuse does to another sandbox's `commands.run("true")`
and to sandboxd's `GET /health`, as ratios of p50 and p99 to a quiet phase just before it.
Target: no ratio above 2 under any single abuser.

One `sandboxd serve --no-network` with the base template (2 CPUs, 1024 MiB, 4096 processes,
10 GiB disk per sandbox). The neighbour is made first and runs `true` through sandboxd's proxy
as the SDK sends it (envd's Process/Start, user "user"), one at a time on a thread of its own;
/health is asked 50 times a second by bench.sandboxd_fleet's probe thread. Each abuser then
gets a fresh sandbox: created, left to settle, measured idle for --seconds (its baseline: on a
shared machine the load drifts within minutes), given its abuse as root through the same API
(so the sandbox's own cgroup limits apply), measured for --seconds again (each phase also
stops at RUNS_PER_PHASE neighbour commands), and killed before the next. The abuser "nothing"
runs `sleep`: its ratios show the noise of the machine.

"less run-queue wait" subtracts each probe thread's own wait for a CPU (the client shares the
two cores with the abuser). The abuser's figures are its cgroup's at the end of its phase.
Run as root: .venv/bin/python -m bench.neighbours [--seconds 30] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shlex
import statistics
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import httpx

from bench.sandboxd_fleet import (
    START,
    Created,
    HealthProbe,
    create_sandbox,
    envelope,
    messages,
    probed_server,
    run_queue_s,
    run_true,
)
from bench.sandboxd_lifecycle import parse_args, percentile

if TYPE_CHECKING:
    from tests.sandboxd.serving import Sandboxd

SETTLE_S = 5  # after an abuser's create: its systemd is still starting units
RUNS_PER_PHASE = 400
RUN_GAP_S = 0.05
RUN_TIMEOUT_S = 60
NEIGHBOUR_TIMEOUT_S = 3600
AS_ROOT = "Basic " + base64.b64encode(b"root:").decode()
BETWEEN = "between"

# Memory: fill to the cgroup's limit in 64 MiB pages-touched chunks until the OOM killer ends
# the process, and again.
_HOG = "chunks = []\nwhile True:\n    chunks.append(b'\\1' * (64 << 20))"
# Open files: FLOOD_PROCESSES processes raise RLIMIT_NOFILE to the kernel's per-process ceiling
# (or the hard limit, if the user namespace's root may not), open eventfds until refused (or
# FLOOD_CAP, which keeps the host's file table of this shared machine out of reach), hold them a
# second, close them, again.
FLOOD_PROCESSES = 8
FLOOD_CAP = 65536
_FLOOD = f"""\
import errno, os, resource, time
ceiling = int(open('/proc/sys/fs/nr_open').read())
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))
except (OSError, ValueError):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
for _ in range({FLOOD_PROCESSES - 1}):
    if os.fork() == 0:
        break
limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
while True:
    first = last = os.eventfd(0)
    refused = 'the cap'
    try:
        while last - first < {FLOOD_CAP - 1}:
            last = os.eventfd(0)
    except OSError as e:
        refused = errno.errorcode[e.errno]
    print(f'{{last - first + 1}} eventfds, then {{refused}} (limit {{limit}})', flush=True)
    time.sleep(1)
    os.closerange(first, last + 1)
"""
ABUSERS = {
    "nothing (sleep)": "sleep infinity",
    "fork bomb": "exec 2>/dev/null; :(){ :|:& };:",
    "CPU spin, 4 loops": "for i in 1 2 3 4; do (while :; do :; done) & done; wait",
    "memory hog": f"n=0; while :; do python3 -c {shlex.quote(_HOG)}; n=$((n+1)); echo $n fills; done",
    "disk I/O (dd, fsync)": "cd /var/tmp; while :; do "
    "dd if=/dev/zero of=dd.bin bs=1M count=256 conv=fsync 2>&1 | tail -n 1; done",
    "open files": f"python3 -c {shlex.quote(_FLOOD)}",
}


@dataclass
class CommandProbe:
    """`commands.run("true")` in the neighbour in a loop on its own thread; latencies (and
    latencies less the thread's run-queue wait) go to the current phase, failures counted."""

    url: str
    neighbour: Created
    phases: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    phase: str = BETWEEN
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=RUN_TIMEOUT_S) as envd:
            with open("/proc/thread-self/schedstat") as sched:
                while not self._stop.is_set():
                    phase = self.phase
                    if len(self.phases[phase]) < RUNS_PER_PHASE:
                        await self._one(envd, sched, phase)
                    await asyncio.sleep(RUN_GAP_S)

    async def _one(self, envd: httpx.AsyncClient, sched: TextIO, phase: str) -> None:
        waited = run_queue_s(sched)
        begin = time.monotonic()
        try:
            await run_true(envd, self.neighbour)
        except (httpx.HTTPError, AssertionError):
            self.failures[phase] += 1
            return
        took = time.monotonic() - begin
        self.phases[phase].append((took, took - (run_queue_s(sched) - waited)))

    def enter(self, phase: str) -> None:
        self.phase = phase

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class AbuserFigures:
    cpu_per_s: float  # CPU seconds per second of the phase
    memory_mib: float
    pids: int
    said: str  # the last line of its standard output


async def _abuse(envd: httpx.AsyncClient, abuser: Created, script: str, bound_s: float,
                 started: asyncio.Event) -> str:  # fmt: skip
    """Run `script` as root in the abuser until its sandbox is killed (or `bound_s` passes);
    return the last line it printed."""
    command = f"exec timeout -s KILL {bound_s:.0f} bash -c {shlex.quote(script)}"
    request = {"process": {"cmd": "/bin/bash", "args": ["-c", command], "envs": {}}}
    headers = {"E2b-Sandbox-Id": abuser.sandbox_id, "E2b-Sandbox-Port": "49983",
               "Content-Type": "application/connect+json", "Authorization": AS_ROOT}  # fmt: skip
    if abuser.token is not None:
        headers["X-Access-Token"] = abuser.token
    body = b""
    try:
        async with envd.stream("POST", START, content=envelope(request), headers=headers) as r:
            assert r.status_code == 200, await r.aread()
            started.set()
            async for chunk in r.aiter_bytes():
                body += chunk
    except httpx.HTTPError:
        pass  # the kill cut the stream
    out = b"".join(base64.b64decode(m["event"]["data"]["stdout"])
                   for flags, m in messages(body)
                   if not flags & 2 and "stdout" in m.get("event", {}).get("data", {}))  # fmt: skip
    lines = out.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


async def _phase(server: Sandboxd, probes: tuple[HealthProbe, CommandProbe], name: str,
                 script: str, seconds: float) -> AbuserFigures:  # fmt: skip
    async with (
        httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=120) as api,
        httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(30, read=None)) as envd,
    ):
        abuser = await create_sandbox(api)
        await asyncio.sleep(SETTLE_S)
        _enter(probes, quiet(name))
        await asyncio.sleep(seconds)
        cgroups = server.cgroups(abuser.sandbox_id)
        started = asyncio.Event()
        abuse = asyncio.create_task(_abuse(envd, abuser, script, seconds + 60, started))
        await started.wait()
        cpu_before = cgroups.usage().cpu_usec
        _enter(probes, name)
        await asyncio.sleep(seconds)
        _enter(probes, BETWEEN)
        usage = cgroups.usage()
        killed = await api.delete(f"/sandboxes/{abuser.sandbox_id}")
        assert killed.status_code == 204, killed.text
        said = await abuse
    return AbuserFigures((usage.cpu_usec - cpu_before) / 1e6 / seconds,
                         usage.memory_bytes / (1 << 20), usage.pids, said)  # fmt: skip


def quiet(abuser: str) -> str:
    """The name of the quiet phase before `abuser`'s: the same sandbox, booted and idle."""
    return f"before {abuser}"


def _enter(probes: tuple[HealthProbe, CommandProbe], phase: str) -> None:
    for probe in probes:
        probe.enter(phase)


async def _phases(server: Sandboxd, probes: tuple[HealthProbe, CommandProbe],
                  seconds: float) -> dict[str, AbuserFigures]:  # fmt: skip
    return {name: await _phase(server, probes, name, script, seconds)
            for name, script in ABUSERS.items()}  # fmt: skip


def _p50_p99(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    """p50, p99 and p99 less the run-queue wait, in ms."""
    took = [s[0] * 1000 for s in samples]
    own = [s[1] * 1000 for s in samples]
    return statistics.median(took), percentile(took, 0.99), percentile(own, 0.99)


def _row(label: str, samples: list[tuple[float, float]], base: tuple[float, float, float]) -> str:
    p50, p99, own = _p50_p99(samples)
    return (f"  {label:18} p50 {p50:7.2f} ms ({p50 / base[0]:5.2f}x)  p99 {p99:7.2f} ms "
            f"({p99 / base[1]:5.2f}x; less run-queue wait {own:7.2f} ms, {own / base[2]:5.2f}x)"
            f"  n={len(samples)}")  # fmt: skip


def report(health: HealthProbe, command: CommandProbe, abusers: dict[str, AbuserFigures],
           load: tuple[float, float]) -> None:  # fmt: skip
    print(f"load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f}")
    cpu = health.cpu_per_s()
    for name, abuser in abusers.items():
        print(f"{name}: abuser {abuser.cpu_per_s:.2f} CPU-s/s, {abuser.memory_mib:.0f} MiB, "
              f"{abuser.pids} processes, said {abuser.said!r}; sandboxd CPU "
              f"{cpu[quiet(name)]:.0f} ms/s quiet, {cpu[name]:.0f} ms/s abused")  # fmt: skip
        for label, probe in (('run("true")', command), ("/health", health)):
            base = _p50_p99(probe.phases[quiet(name)])
            print(_row(f"{label} quiet", probe.phases[quiet(name)], base))
            print(_row(f"{label} abused", probe.phases[name], base))
        failed = command.failures[quiet(name)], command.failures[name]
        if any(failed):
            print(f"  runs failed (quiet, abused): {failed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30)
    args, template = parse_args(parser)
    with probed_server(template, "sandboxd-neighbours-") as (server, health):
        health.enter(BETWEEN)
        neighbour = asyncio.run(_neighbour(server))
        command = CommandProbe(server.url, neighbour)
        thread = threading.Thread(target=command.run, daemon=True)
        thread.start()
        try:
            load_before = os.getloadavg()[0]
            abusers = asyncio.run(_phases(server, (health, command), args.seconds))
            load = (load_before, os.getloadavg()[0])
        finally:
            command.stop()
            thread.join()
    report(health, command, abusers, load)


async def _neighbour(server: Sandboxd) -> Created:
    """The neighbour, kept alive past the create's timeout for the whole run."""
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=120) as api:
        neighbour = await create_sandbox(api)
        path = f"/sandboxes/{neighbour.sandbox_id}/timeout"
        assert (await api.post(path, json={"timeout": NEIGHBOUR_TIMEOUT_S})).status_code == 204
        return neighbour


if __name__ == "__main__":
    main()
