"""Start-up time: from process start to READY=1 on a NOTIFY_SOCKET of our own (what systemd
waits for with Type=notify), against two baselines run in the same session: the bare interpreter
(`python -I -c pass`) and `envd -version` (the CLI without the server stack). And shut-down
time: from SIGTERM to exit with a Start stream open on a child deaf to SIGTERM, which envd
must cut and SIGKILL by its own deadline (tests/process/test_shutdown.py checks that it does).

Run: .venv/bin/python -m bench.startup [--runs 7] [--launcher /usr/bin/envd]
`--launcher` measures an installed envd (packaging/install.sh) instead of this tree's.
Targets: READY=1 within 1 s; exit within the systemd unit's TimeoutStopSec (5 s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.client import start_request
from tests.envd_process import free_port, start_envd

TARGET_MS = 1000
STOP_TARGET_MS = 5000  # packaging/envd.service: TimeoutStopSec
STUBBORN = "trap '' TERM; exec sleep 300"


def time_to_exit(command: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return (time.perf_counter() - begin) * 1000


def cpu_ms(pid: int) -> float:
    """CPU time so far of a process's live threads, in ns resolution (/proc/PID/stat's utime
    and stime count 10 ms ticks, too coarse for a start-up of ~150 ms of CPU)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e6


def time_to_ready(command: list[str], tmp: Path) -> float:
    """Milliseconds from spawning envd to its READY=1; /health must answer right after."""
    return start_to_ready(command, tmp)[0]


def start_to_ready(command: list[str], tmp: Path) -> tuple[float, float]:
    """Wall and CPU milliseconds from spawning envd to its READY=1 (the CPU time envd and its
    launcher, which execs it, have used by then: insensitive to other load on the machine);
    /health must answer right after."""
    address = tmp / "notify.sock"
    address.unlink(missing_ok=True)
    port = free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(address))
        sock.settimeout(30)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NOTIFY_SOCKET": str(address)}
        begin = time.perf_counter()
        proc = subprocess.Popen(
            [*command, "-port", str(port), "-bind", "127.0.0.1", "-isnotfc"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while b"READY=1" not in sock.recv(4096).split(b"\n"):
                pass
            elapsed = (time.perf_counter() - begin) * 1000
            cpu = cpu_ms(proc.pid)
            status = httpx.get(f"http://127.0.0.1:{port}/health").status_code
            assert status == 204, f"READY=1 sent but /health answered {status}"
        finally:
            proc.terminate()
            proc.wait(10)
    return elapsed, cpu


def sigterm_to_exit(command: list[str], tmp: Path) -> float:
    """Milliseconds from SIGTERM to envd's exit, with a Start stream open on STUBBORN."""
    daemon = start_envd(tmp, command=command)
    try:
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", f"{daemon.url}/process.Process/Start",
                        content=start_request(STUBBORN),
                        headers={"content-type": "application/connect+json"}) as r,
        ):  # fmt: skip
            next(r.iter_raw())  # the start event: the stream is open
            begin = time.perf_counter()
            daemon.proc.send_signal(signal.SIGTERM)
            daemon.proc.wait(60)
            return (time.perf_counter() - begin) * 1000
    finally:
        daemon.stop()


def row(name: str, samples: list[float], baseline: float) -> str:
    median = statistics.median(samples)
    return f"{name:<34} {median:>9.0f} {min(samples):>9.0f} {median / baseline:>8.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--launcher", help="an installed envd launcher, e.g. /usr/bin/envd")
    args = parser.parse_args()
    envd = [args.launcher] if args.launcher else [sys.executable, "-m", "envd"]
    python = sys.executable
    if args.launcher:  # the installed prefix's interpreter, read from the launcher
        exec_line = Path(args.launcher).read_text().splitlines()[-1]
        python = exec_line.split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        bare = [time_to_exit([python, "-I", "-c", "pass"]) for _ in range(args.runs)]
        version = [time_to_exit([*envd, "-version"]) for _ in range(args.runs)]
        ready = [time_to_ready(envd, Path(tmp)) for _ in range(args.runs)]
        stop = [sigterm_to_exit(envd, Path(tmp)) for _ in range(args.runs)]
    baseline = statistics.median(bare)
    print(f"{'ms (median of ' + str(args.runs) + ')':<34} {'median':>9} {'min':>9} {'ratio':>9}")
    print(row("python -I -c pass (baseline)", bare, baseline))
    print(row("envd -version", version, baseline))
    print(row("envd start -> READY=1", ready, baseline))
    verdict = "ok" if statistics.median(ready) < TARGET_MS else "OVER TARGET"
    print(f"target: READY=1 within {TARGET_MS} ms: {verdict}")
    print(f"{'envd SIGTERM -> exit':<34} {statistics.median(stop):>9.0f} "
          f"{min(stop):>9.0f}")  # fmt: skip
    verdict = "ok" if max(stop) < STOP_TARGET_MS else "OVER TARGET"
    print(f"target: exit within {STOP_TARGET_MS} ms of SIGTERM (slowest of the runs): {verdict}")


if __name__ == "__main__":
    main()
