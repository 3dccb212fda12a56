"""Per-request cost of small uploads: COUNT uploads of SIZE KiB (default 1000 x 4 KiB) over one
keep-alive httpx client, as a user's write loop sends them, against envd's own CPU.

For each server, interleaved over the rounds: uploads per second and CPU milliseconds per
upload (utime + stime of the server process from /proc/PID/stat, over the whole batch).
Servers: the raw ASGI app of bench.upload (uvicorn, uvloop + httptools, one os.write per
chunk: the floor any Python server on this stack pays), envd with octet-stream and multipart
bodies, and with `--before TREE` the same two for an older envd source tree (for example a
`git archive` of an earlier commit), started from that tree.

Target (issue: per-request cost): envd octet-stream <= 0.3 ms of CPU per 4 KiB upload.
Run: .venv/bin/python -m bench.small_uploads [--rounds 5] [--before /tmp/envd-before]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.transfer import start_baseline, stop
from tests.envd_process import DIE_WITH_PARENT, free_port
from tests.waiting import wait_until

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OCTET = {"Content-Type": "application/octet-stream"}
_ENVD_FLAGS = ("-bind", "127.0.0.1", "-isnotfc", "-port")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    multipart: bool = False
    floor: bool = False
    rates: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def start_envd_from(tree: Path, log_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m envd` from a source tree (its own directory first on sys.path)."""
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    with open(f"{log_dir}/envd-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [*DIE_WITH_PARENT, sys.executable, "-m", "envd", *_ENVD_FLAGS, str(port)],
            cwd=tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 204
        except httpx.TransportError:
            return False

    wait_until(healthy, 15, f"envd from {tree} to answer /health")
    return proc, url


def upload_batch(server: Server, work: str, count: int, payload: bytes) -> None:
    """One round: `count` uploads over one connection; appends the rate and CPU per upload."""
    with httpx.Client(base_url=server.url, timeout=60) as client:

        def upload(index: int) -> httpx.Response:
            target = f"{work}/{server.name.replace(' ', '-')}-{index}"
            if server.floor:
                return client.post("/upload", content=payload, headers=OCTET)
            if server.multipart:
                return client.post("/files", files={"file": (target, payload)})
            return client.post("/files", params={"path": target}, content=payload, headers=OCTET)

        upload(0).raise_for_status()  # the connection is open before the clock starts
        cpu_before = cpu_seconds(server.proc.pid)
        started = time.perf_counter()
        for index in range(count):
            upload(index).raise_for_status()
        elapsed = time.perf_counter() - started
        server.cpu_ms.append((cpu_seconds(server.proc.pid) - cpu_before) * 1000 / count)
    server.rates.append(count / elapsed)
    for entry in os.scandir(work):
        os.unlink(entry.path)


def _report(servers: list[Server], count: int, size_kib: int, rounds: int) -> None:
    print(f"\n{count} x {size_kib} KiB uploads over one keep-alive httpx client, {rounds} rounds")
    print("| server | uploads/s median [range] | CPU ms per upload median [range] |")
    print("|---|---|---|")
    for s in servers:
        print(
            f"| {s.name} | {statistics.median(s.rates):.0f} "
            f"[{min(s.rates):.0f}-{max(s.rates):.0f}] | {statistics.median(s.cpu_ms):.3f} "
            f"[{min(s.cpu_ms):.3f}-{max(s.cpu_ms):.3f}] |"
        )
    by_name = {s.name: s for s in servers}
    for kind in ("octet-stream", "multipart"):
        now, before = by_name.get(f"envd {kind}"), by_name.get(f"before {kind}")
        if now is None or before is None:
            continue
        cpu = statistics.median(a / b for a, b in zip(now.cpu_ms, before.cpu_ms, strict=True))
        rate = statistics.median(a / b for a, b in zip(now.rates, before.rates, strict=True))
        print(f"{kind}: CPU per upload {cpu:.2f}x before, uploads/s {rate:.2f}x (per-round median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size-kib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older envd source tree to compare")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-small-", dir="/dev/shm")
    log_dir = tempfile.mkdtemp(prefix="bench-small-logs-")
    servers: list[Server] = []
    try:
        floor_proc, floor_url = start_baseline("bench.upload", work)
        servers.append(Server("raw ASGI + os.write (floor)", floor_url, floor_proc, floor=True))
        trees = [("envd", Path.cwd())] + ([("before", args.before)] if args.before else [])
        for label, tree in trees:
            proc, url = start_envd_from(tree, log_dir)
            servers.append(Server(f"{label} octet-stream", url, proc))
            servers.append(Server(f"{label} multipart", url, proc, multipart=True))
        payload = os.urandom(args.size_kib * 1024)
        for _ in range(args.rounds):
            for server in servers:
                upload_batch(server, work, args.count, payload)
    finally:
        for proc in {id(s.proc): s.proc for s in servers}.values():
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)
    _report(servers, args.count, args.size_kib, args.rounds)


if __name__ == "__main__":
    main()
