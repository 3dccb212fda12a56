"""B8 (a) and (e): an idle daemon's memory and CPU, envd vs a minimal uvicorn app (uvloop +
httptools, one route) idling side by side over the same window.

Run: .venv/bin/python -m bench.idle [--seconds 60]
Targets: RSS <= 60 MiB, CPU <= 0.5 % of one core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.envd_process import free_port, start_envd

MIB = 1 << 20
TARGET_RSS_MIB = 60
TARGET_CPU_PCT = 0.5
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")

BASELINE_APP = """
import uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})

uvicorn.run(app, host="127.0.0.1", port={port}, loop="uvloop", http="httptools",
            log_level="warning", access_log=False)
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * _PAGE / MIB


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def start_baseline() -> subprocess.Popen[bytes]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", BASELINE_APP.replace("{port}", str(port))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("baseline app did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as logs:
        envd = start_envd(Path(logs))
        baseline = start_baseline()
        try:
            # One request each, then let start-up work (imports, first GC) settle.
            httpx.get(envd.url + "/health")
            time.sleep(2)
            pids = {"envd": envd.pid, "baseline": baseline.pid}
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - started
            cpu = {n: 100 * (cpu_seconds(p) - cpu_before[n]) / elapsed for n, p in pids.items()}
            rss = {name: rss_mib(pid) for name, pid in pids.items()}
            tasks = {name: threads(pid) for name, pid in pids.items()}
        finally:
            envd.stop()
            baseline.terminate()
            baseline.wait(10)

    print(f"idle over {elapsed:.0f} s (CPU as % of one core)")
    print(f"{'metric':<10}{'envd':>10}{'baseline':>10}{'ratio':>8}{'target':>10}")
    print(
        f"{'RSS MiB':<10}{rss['envd']:>10.1f}{rss['baseline']:>10.1f}"
        f"{rss['envd'] / rss['baseline']:>8.2f}{'<= ' + str(TARGET_RSS_MIB):>10}"
    )
    ratio = cpu["envd"] / cpu["baseline"] if cpu["baseline"] else float("inf")
    print(
        f"{'CPU %':<10}{cpu['envd']:>10.3f}{cpu['baseline']:>10.3f}"
        f"{ratio:>8.2f}{'<= ' + str(TARGET_CPU_PCT):>10}"
    )
    print(f"{'threads':<10}{tasks['envd']:>10}{tasks['baseline']:>10}")


if __name__ == "__main__":
    main()
