"""The cluster against one machine, in one run: a single `sandboxd serve` on PostgreSQL (the
baseline) and on SQLite, and clusters of 1, 2 and 3 `sandboxd node` agents each behind one
`sandboxd gateway` (each cluster its own database in one Debian PostgreSQL on loopback:
tests/store/postgres_server.py; agents and gateways are tests/cluster's node_agent.py and
gateway.py, every process stopped by pid). Every serve and agent has `--pool 1`,
`--no-network` and the cached base template; rounds interleave the five, in reverse order every
other round. Per round and each (`--creates` times for 1.):

1. pooled create → first command: the unmodified Python SDK's `Sandbox.create()` then
   `commands.run("true")` through the proxy (bench/sdk_creator.py, as bench.sandboxd_lifecycle),
   once every pool of the target is full. Target: gateway ≤ serve (PostgreSQL) + 3 ms p50.
2. a proxied request: envd's `GET /health` and a small file read (`/files`, /etc/hostname) over
   one keep-alive connection (wrk, 2 s each; the medians over the rounds of its p50 and p95) with E2B's routing
   headers, through serve's proxy, through the gateway and its node, and straight to the node's
   proxy (the cluster token added, as the gateway adds it). Target: gateway ≤ serve + 0.5 ms p50.
3. CPU per create → first command and per kill (the threads' run time from /proc's schedstat,
   summed over the rounds, per create) of the control plane: the gateway process and its
   PostgreSQL backends (by `application_name`), against serve's process and backends; the
   agents' too, and each part's CPU per second while idle (heartbeats, the gateways'
   reconciliation, the pools' upkeep; 10 s after the rounds). Target: no growth with N.
And, in-process, 4. placement alone: `sandboxd.cluster.placement.choose` (best-of-3) over N
heartbeat rows per decision, and the rows' read (`Store.nodes()`) from PostgreSQL beside it.

Run as root: .venv/bin/python -m bench.cluster [--rounds 8] [--creates 3] [--template DIR]
             [--profile DIR]  (py-spy on the PATH)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from bench.sandboxd_lifecycle import SdkCreator, parse_args, percentile, pool_full, scratch
from sandboxd.cluster import placement
from sandboxd.daemon.serve import open_store
from sandboxd.store.rows import NodeRow
from tests.cluster.gateway import DOMAIN, Gateway
from tests.cluster.node_agent import NodeAgent
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sandboxd.store.interface import Store

ENVD_PORT = 49983
WRK_SCRIPT = """done = function(summary, latency, requests)
  io.write(string.format("bench %d %d %d\\n", latency:percentile(50), latency:percentile(95),
                         summary.requests))
end
"""
PATHS = {"health": "/health", "file": "/files?path=/etc/hostname&username=user"}


def cpu_s(pid: int) -> float:
    """The CPU seconds the process's threads have run (schedstat's ns: /proc's utime and stime
    count 10 ms ticks, about a create's whole cost); 0 when it is gone. A thread that ended
    is not counted: the processes measured keep theirs."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int(task.read_text().split()[0])
    return total / 1e9


@dataclass
class Target:
    """What a client talks to (`front`: serve or a gateway) and what runs its sandboxes."""

    name: str
    front: Sandboxd
    database: str | None  # the database's URL (None: SQLite)
    nodes: list[NodeAgent] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # seconds, summed over the rounds

    def add(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)

    def add_cpu(self, name: str, seconds: float) -> None:
        self.cpu[name] = self.cpu.get(name, 0.0) + seconds

    def pool_members(self) -> list[Sandboxd]:
        return list(self.nodes) if self.nodes else [self.front]

    def start(self, stack: contextlib.ExitStack) -> None:
        """Start its processes, the agents before their gateway, each stopped with `stack`."""
        for member in self.pool_members():
            stack.callback(member.clean_up)
            member.start()
        if self.nodes:
            stack.callback(self.front.stop)
            self.front.start()

    def backends(self, app: str) -> list[int]:
        """The pids of the PostgreSQL backends serving `app`'s connections."""
        if self.database is None:
            return []
        with psycopg.connect(self.database) as db:
            rows = db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                              "AND datname = current_database()", (app,)).fetchall()  # fmt: skip
        return [int(r[0]) for r in rows]

    def cpu_snapshot(self) -> dict[str, dict[int, float]]:
        """CPU seconds by pid of each part: the front, its database backends, the agents."""
        parts = {"front": [self.front.pid], "db": self.backends("control")}
        parts["nodes"] = [n.pid for n in self.nodes]
        return {part: {pid: cpu_s(pid) for pid in pids} for part, pids in parts.items()}

    def add_cpu_since(self, label: str, before: dict[str, dict[int, float]]) -> None:
        after = self.cpu_snapshot()
        for part, pids in after.items():
            used = sum(t - before[part].get(pid, 0.0) for pid, t in pids.items())
            self.add_cpu(f"{label} {part}", used)


def with_app(url: str, app: str) -> str:
    return f"{url}?application_name={app}"


@contextlib.contextmanager
def running_targets(work: Path, template: Path) -> Iterator[tuple[list[Target], str]]:
    """serve on SQLite and PostgreSQL, and clusters of 1, 2 and 3 agents, all stopped after;
    and the URL of an unused database."""
    db = PostgresServer()
    pool = ("--pool", "1")
    with contextlib.ExitStack() as stack:
        stack.callback(db.stop)
        db.start()
        serve_url = db.create_database()
        targets = [
            Target("serve SQLite", Sandboxd(work / "serve-sqlite", template, NO_NETWORK, *pool), None),
            Target("serve PG", Sandboxd(work / "serve-pg", template, NO_NETWORK, *pool,
                   "--database-url", with_app(serve_url, "control")), serve_url),
        ]  # fmt: skip
        for size in (1, 2, 3):
            url, token = db.create_database(), secrets.token_hex(16)
            nodes = []
            for i in range(size):
                (state := work / f"c{size}-node-{i}").mkdir()
                nodes.append(NodeAgent(state, template, with_app(url, "node"), f"node-{i}",
                                       NO_NETWORK, "--domain", DOMAIN, *pool, token=token))  # fmt: skip
            gateway = Gateway(work / f"c{size}-gateway", with_app(url, "control"), token)
            targets.append(Target(f"gateway N={size}", gateway, url, nodes))
        for target in targets:
            target.start(stack)
        yield targets, db.create_database()


def wrk(url: str, headers: dict[str, str], script: Path) -> tuple[float, float, int]:
    """(p50 s, p95 s, requests) of GET `url` over one connection for 2 s."""
    argv = ["wrk", "-t1", "-c1", "-d2s", "-s", str(script)]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    match = re.search(r"^bench (\d+) (\d+) (\d+)$", out, re.MULTILINE)
    assert match, out
    return int(match.group(1)) / 1e6, int(match.group(2)) / 1e6, int(match.group(3))


def proxied(target: Target, sandbox: dict[str, str], node: NodeAgent | None,
            script: Path) -> None:  # fmt: skip
    """envd's /health and a file read through the target's proxy (and the node's own)."""
    routed = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": str(ENVD_PORT),
              "X-Access-Token": sandbox.get("envdAccessToken") or ""}  # fmt: skip
    ways: list[tuple[str, str, dict[str, str], int]] = [("via", target.front.url, routed,
                                                         target.front.pid)]  # fmt: skip
    if node is not None:
        ways.append(("node", node.proxy_url, {**routed, **node.proxy_headers}, node.pid))
    for way, base, headers, pid in ways:
        for name, path in PATHS.items():
            before = cpu_s(pid)
            p50, p95, count = wrk(base + path, headers, script)
            target.add(f"{name} {way} p50", p50)
            target.add(f"{name} {way} p95", p95)
            target.add(f"{name} {way} cpu", (cpu_s(pid) - before) / count)


def owner(target: Target, sandbox_id: str) -> NodeAgent | None:
    if target.database is None or not target.nodes:
        return None
    with psycopg.connect(target.database) as db:
        row = db.execute("SELECT node_id FROM sandbox_catalog WHERE sandbox_id = %s",
                         (sandbox_id,)).fetchone()  # fmt: skip
    assert row is not None, sandbox_id
    return next(n for n in target.nodes if n.node_id == row[0])


async def one_round(sdk: SdkCreator, target: Target, script: Path, creates: int) -> None:
    """`creates` pooled creates → first command, each killed; the proxied requests to the
    last."""
    for i in range(creates):
        for member in target.pool_members():
            await pool_full(member, 1, set())
        before = target.cpu_snapshot()
        made = await sdk.create(target.front)
        target.add_cpu_since("create", before)
        target.add("create→command", made.total_s)
        target.add("create", made.create_s)
        await asyncio.to_thread(kill, target, made.sandbox_id, script if i == creates - 1 else None)


def idle_cpu(targets: list[Target], seconds: int) -> None:
    """Each part's CPU per second while nothing is asked of it (heartbeats, the gateways'
    reconciliation, the pools' upkeep), as samples "idle PART"."""
    before = [t.cpu_snapshot() for t in targets]
    time.sleep(seconds)
    for target, snapshot in zip(targets, before, strict=True):
        target.add_cpu_since("idle", snapshot)
        target.samples["idle"] = [1.0] * seconds  # one per second: the CPU per second


def kill(target: Target, sandbox_id: str, script: Path | None) -> None:
    """Kill the sandbox, timed; the proxied requests first when given their `script`."""
    with target.front.client() as api:
        if script is not None:
            sandbox = api.get(f"/sandboxes/{sandbox_id}").json()
            proxied(target, sandbox, owner(target, sandbox_id), script)
        before = target.cpu_snapshot()
        started = time.perf_counter()
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        target.add("kill", time.perf_counter() - started)
        target.add_cpu_since("kill", before)


async def rounds(targets: list[Target], count: int, creates: int, script: Path) -> None:
    sdk = SdkCreator()
    try:
        for target in targets:  # untimed: the SDK's and each server's first-use costs
            await one_round(sdk, target, script, 1)
            target.samples.clear()
            target.cpu.clear()
        for i in range(count):
            for target in targets if i % 2 == 0 else targets[::-1]:
                await one_round(sdk, target, script, creates)
    finally:
        sdk.close()


def _beat(store: Store, row: NodeRow) -> None:
    """The heartbeat's write, its drain flag read back unused."""
    store.heartbeat_node(row)


def heartbeat_rows(count: int, rng: random.Random) -> list[NodeRow]:
    """`count` live nodes as heartbeats describe them; a third with a warm `base`."""
    now = time.time_ns() // 1000
    return [
        NodeRow(f"node-{i:04}", f"http://10.0.{i // 250}.{i % 250}:49990",
                f"10.0.{i // 250}.{i % 250}:49991", now, 10, False,
                {"cpus": 16, "memory_mb": 65536, "max_sandboxes": 200,
                 "sandboxes": rng.randrange(150), "cpu_requested": rng.randrange(64),
                 "cpu_usage": rng.random() * 16, "memory_used_mb": rng.randrange(65536),
                 "warm": {"base": int(i % 3 == 0)}, "templates": ["base"]})
        for i in range(count)
    ]  # fmt: skip


def per_call_us(call: Callable[[], object], times: int) -> float:
    """The best of three batches of `times` calls, per call."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(times):
            call()
        best = min(best, (time.perf_counter() - started) / times)
    return best * 1e6


def placement_rows(database_url: str) -> list[tuple[int, float, float]]:
    """(N, µs per placement decision over N rows, µs per read of the N rows from PostgreSQL)."""
    rng = random.Random(35)  # noqa: S311  (not a secret)
    store = open_store(Path(), database_url)
    found = []
    try:
        written = 0
        for count in (1, 3, 10, 100, 1000):
            rows = heartbeat_rows(count, rng)
            for row in rows[written:]:
                asyncio.run(store.write(functools.partial(_beat, store, row)))
            written = count
            decide = functools.partial(placement.choose, rows, "base", 2, time.time_ns() // 1000)
            decide_us = per_call_us(decide, 2000)
            found.append((count, decide_us, per_call_us(store.nodes, max(10, 3000 // count))))
    finally:
        store.close()
    return found


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def p50_p95(samples: list[float]) -> str:
    return f"{ms(statistics.median(samples))} / {ms(percentile(samples, 0.95))}"


def latency(target: Target, name: str, way: str) -> str:
    if way == "node" and not target.nodes:
        return "-"
    return f"{ms(statistics.median(target.samples[f'{name} {way} p50']))} / " + ms(
        percentile(target.samples[f"{name} {way} p95"], 0.5)
    )


def cpu_per_request(target: Target, name: str, way: str) -> str:
    if way == "node" and not target.nodes:
        return "-"
    return f"{statistics.median(target.samples[f'{name} {way} cpu']) * 1e6:.0f}"


def cpu_per_step(target: Target, step: str, part: str) -> str:
    return ms(target.cpu.get(f"{step} {part}", 0.0) / len(target.samples[step]))


def row(label: str, targets: list[Target], cell: Callable[[Target], str]) -> None:
    print(f"{label:36}" + "".join(f"{cell(t):>17}" for t in targets))


def report(targets: list[Target]) -> None:
    row("ms", targets, lambda t: t.name)
    row("create → first command p50 / p95", targets, lambda t: p50_p95(t.samples["create→command"]))
    row("  of which Sandbox.create()", targets, lambda t: p50_p95(t.samples["create"]))
    row("kill p50 / p95", targets, lambda t: p50_p95(t.samples["kill"]))
    for name in PATHS:
        for way, label in (("via", "through the front"), ("node", "node's proxy alone")):
            row(
                f"{name} p50 / p95 {label}", targets, functools.partial(latency, name=name, way=way)
            )
    for name in PATHS:
        for way, label in (("via", "serve / gateway"), ("node", "node agent")):
            row(f"{name} µs CPU per request, {label}", targets,
                functools.partial(cpu_per_request, name=name, way=way))  # fmt: skip
    for step in ("create", "kill", "idle"):
        for part, label in (("front", "serve / gateway"), ("db", "its DB backends"),
                            ("nodes", "node agents")):  # fmt: skip
            per = "per s idle" if step == "idle" else f"per {step}"
            row(f"CPU ms {per}: {label}", targets,
                functools.partial(cpu_per_step, step=step, part=part))  # fmt: skip
    base = next(t for t in targets if t.name == "serve PG")
    for target in (t for t in targets if t.nodes):
        deltas = [
            (label, statistics.median(target.samples[key]) - statistics.median(base.samples[key]))
            for label, key in (("create → command", "create→command"),
                               ("health", "health via p50"), ("file", "file via p50"))
        ]  # fmt: skip
        print(f"{target.name} - serve PG, p50: "
              + ", ".join(f"{n} {d * 1000:+.2f} ms" for n, d in deltas))  # fmt: skip


@contextlib.contextmanager
def profiled(targets: list[Target], into: Path | None) -> Iterator[None]:
    """py-spy recording the fronts on PostgreSQL while the block runs (collapsed stacks, CPU
    samples only, into `into`/NAME.txt), stopped by pid; nothing when `into` is None."""
    spies = []
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
        for target in (t for t in targets if t.database is not None):
            out = into / (target.name.replace(" ", "-").replace("=", "") + ".txt")
            spies.append(subprocess.Popen(["py-spy", "record", "--nonblocking", "--format", "raw",
                                           "-r", "200", "-p", str(target.front.pid), "-o",
                                           str(out)], stdout=subprocess.DEVNULL))  # fmt: skip
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--creates", type=int, default=3, help="creates per round and target")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy's samples of serve PG and each gateway into DIR")  # fmt: skip
    args, template = parse_args(parser)
    with scratch("bench-cluster-") as work, running_targets(work, template) as (targets, spare):
        script = work / "percentiles.lua"
        script.write_text(WRK_SCRIPT)
        load_before = os.getloadavg()
        with profiled(targets, args.profile):
            asyncio.run(rounds(targets, args.rounds, args.creates, script))
        idle_cpu(targets, 10)
        load_after = os.getloadavg()
        placements = placement_rows(spare)
    print(f"load average (1, 5, 15 min) at start: {load_before}, at end: {load_after}")
    report(targets)
    print("placement, in-process: N rows, µs per best-of-3 decision, µs per read of the rows")
    for count, decide, read in placements:
        print(f"  N={count:5}  choose {decide:8.1f} µs  Store.nodes() {read:8.1f} µs")


if __name__ == "__main__":
    main()
