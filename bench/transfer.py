"""Shared plumbing for the file-transfer benchmarks (B1 upload, B2 download): baseline
servers in a subprocess, curl timings, peak RSS and the result table."""

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
from typing import TYPE_CHECKING

import httpx

from tests.envd_process import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

MIB = 1024 * 1024


@dataclass
class Series:
    """MiB/s of repeated runs of one variant."""

    name: str
    rates: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.rates)

    def row(self, baseline: Series | None) -> str:
        ratio = f"{self.median() / baseline.median():.2f}x" if baseline else "-"
        spread = f"[{min(self.rates):.0f}-{max(self.rates):.0f}]"
        return f"| {self.name} | {self.median():.0f} {spread} | {ratio} |"


def start_baseline(
    module: str, *args: str, prefix: Sequence[str] = (), timeout_s: float = 20
) -> tuple[subprocess.Popen[bytes], str]:
    """Run `python -m <module> --serve-baseline PORT ARGS…` (after the `prefix` command, such
    as valgrind) and wait until it answers."""
    port = free_port()
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", module, "--serve-baseline", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(f"{url}/ping", timeout=1)
            return proc, url
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"baseline {module} did not start") from None
            time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(10)


def curl_seconds(*args: str) -> float:
    """Run curl and return its total transfer time; fails on any HTTP error status."""
    result = subprocess.run(
        ["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{time_total}", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(result.stdout)


def rss_mib(pid: int, field_name: str) -> float:
    """VmRSS (current) or VmHWM (peak) of a process, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(field_name)


def make_payload(path: str, size: int) -> None:
    with open(path, "wb") as f:
        block = os.urandom(MIB)
        f.writelines(block for _ in range(size // MIB))
        f.write(block[: size % MIB])


def print_table(title: str, series: list[Series], baseline: Series) -> None:
    print(f"\n{title}\n| variant | MiB/s median [range] | ratio to baseline |\n|---|---|---|")
    for s in series:
        print(s.row(None if s is baseline else baseline))


def transfer_main(
    description: str | None,
    name: str,
    baseline_arg: str,
    serve_baseline: Callable[[int, str], None],
    run: Callable[[int, int, str, str], None],
    *,
    default_size_mib: int = 1024,
) -> None:
    """Command line shared by the transfer benchmarks: either serve the baseline app (the
    benchmark re-runs itself with --serve-baseline PORT ARG) or run the measurement with the
    payload on tmpfs, cleaning up afterwards."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size-mib", type=int, default=default_size_mib)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--serve-baseline", nargs=2, metavar=("PORT", baseline_arg))
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(int(args.serve_baseline[0]), args.serve_baseline[1])
        return
    work = tempfile.mkdtemp(prefix=f"{name}-", dir="/dev/shm")
    log_dir = tempfile.mkdtemp(prefix=f"{name}-logs-")
    try:
        run(args.size_mib * MIB, args.runs, work, log_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)
