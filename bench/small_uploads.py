"""Per-request cost of small uploads: COUNT uploads of SIZE KiB (default 1000 x 4 KiB) over one
keep-alive httpx client, as a user's write loop sends them, against envd's own CPU.

For each server, interleaved over the rounds: uploads per second and CPU milliseconds per
upload (utime + stime of the server process from /proc/PID/stat, over the whole batch).
Servers: the raw ASGI app of bench.upload (uvicorn, uvloop + httptools, one os.write per
chunk: the floor any Python server on this stack pays), envd with octet-stream and multipart
bodies, and with `--before TREE` the same two for an older envd source tree (for example a
`git archive` of an earlier commit), started from that tree.

With `--callgrind` every server runs once under valgrind's callgrind instead, and the figure
is the instructions it executes in user space per upload (the kernel's work, the same few
syscalls for every server but the file creation, is not counted): slow, but the same on a
quiet machine and a busy one, where CPU times vary by a factor of two.

Target (issue: per-request cost): envd octet-stream <= 0.3 ms of CPU per 4 KiB upload.
Run: .venv/bin/python -m bench.small_uploads [--rounds 5] [--before /tmp/envd-before]
     [--callgrind]   (needs valgrind)
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
# Under callgrind a server starts and runs some 50 times slower.
_CALLGRIND_START_S = 120


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def callgrind(out_dir: str) -> tuple[str, ...]:
    """The command prefix that runs a server under callgrind, its dumps in `out_dir`."""
    return ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.%p")


def _callgrind_control(pid: int, command: str) -> None:
    subprocess.run(["callgrind_control", command, str(pid)], check=True, stdout=subprocess.DEVNULL)


def _last_dump_instructions(out_dir: str, pid: int) -> int:
    dumps = [p for p in Path(out_dir).glob(f"callgrind.{pid}.*") if p.suffix[1:].isdigit()]
    newest = max(dumps, key=lambda p: int(p.suffix[1:]))
    for line in newest.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {newest}")


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    multipart: bool = False
    floor: bool = False
    # Where its callgrind dumps go, when it runs under callgrind.
    callgrind_dir: str | None = None
    rates: list[float] = field(default_factory=list)
    # Per upload: CPU milliseconds, or instructions under callgrind.
    costs: list[float] = field(default_factory=list)

    def begin(self) -> float:
        if self.callgrind_dir is not None:
            _callgrind_control(self.proc.pid, "--zero")
            return 0.0
        return cpu_seconds(self.proc.pid) * 1000

    def since(self, begun: float) -> float:
        """CPU milliseconds, or instructions, since `begun` (what begin() returned)."""
        if self.callgrind_dir is None:
            return cpu_seconds(self.proc.pid) * 1000 - begun
        _callgrind_control(self.proc.pid, "--dump")
        return _last_dump_instructions(self.callgrind_dir, self.proc.pid)


def start_envd_from(
    tree: Path, log_dir: str, prefix: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m envd` from a source tree (its own directory first on sys.path), after the
    `prefix` command (callgrind) if any."""
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    with open(f"{log_dir}/envd-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [*DIE_WITH_PARENT, *prefix, sys.executable, "-m", "envd", *_ENVD_FLAGS, str(port)],
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

    wait_until(healthy, _CALLGRIND_START_S if prefix else 15, f"envd from {tree} to answer /health")
    return proc, url


def upload_batch(server: Server, work: str, count: int, payload: bytes) -> None:
    """One round: `count` uploads over one connection; appends the rate and the cost (CPU or
    instructions) per upload."""
    with httpx.Client(base_url=server.url, timeout=60) as client:

        def upload(index: int) -> httpx.Response:
            target = f"{work}/{server.name.replace(' ', '-')}-{index}"
            if server.floor:
                return client.post("/upload", content=payload, headers=OCTET)
            if server.multipart:
                return client.post("/files", files={"file": (target, payload)})
            return client.post("/files", params={"path": target}, content=payload, headers=OCTET)

        upload(0).raise_for_status()  # the connection is open before the clock starts
        begun = server.begin()
        started = time.perf_counter()
        for index in range(count):
            upload(index).raise_for_status()
        elapsed = time.perf_counter() - started
        server.costs.append(server.since(begun) / count)
    server.rates.append(count / elapsed)
    for entry in os.scandir(work):
        os.unlink(entry.path)


def _report(servers: list[Server], count: int, size_kib: int, rounds: int, unit: str) -> None:
    print(f"\n{count} x {size_kib} KiB uploads over one keep-alive httpx client, {rounds} rounds")
    print(f"| server | uploads/s median [range] | {unit} per upload median [range] |")
    print("|---|---|---|")
    form = ".3f" if unit == "CPU ms" else ".0f"  # instructions: whole numbers
    for s in servers:
        print(
            f"| {s.name} | {statistics.median(s.rates):.0f} "
            f"[{min(s.rates):.0f}-{max(s.rates):.0f}] | {statistics.median(s.costs):{form}} "
            f"[{min(s.costs):{form}}-{max(s.costs):{form}}] |"
        )
    by_name = {s.name: s for s in servers}
    floor = servers[0]
    for kind in ("octet-stream", "multipart"):
        now, before = by_name.get(f"envd {kind}"), by_name.get(f"before {kind}")
        if now is None:
            continue
        print(f"{kind}: {unit} per upload {_ratio(now.costs, floor.costs):.2f}x the floor")
        if before is not None:
            cost = _ratio(now.costs, before.costs)
            rate = _ratio(now.rates, before.rates)
            print(f"{kind}: {unit} per upload {cost:.2f}x before, uploads/s {rate:.2f}x")
    print("(ratios: medians of the per-round ratios)")


def _ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size-kib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older envd source tree to compare")
    parser.add_argument("--callgrind", action="store_true", help="count instructions, 1 round")
    args = parser.parse_args()
    rounds = 1 if args.callgrind else args.rounds
    work = tempfile.mkdtemp(prefix="bench-small-", dir="/dev/shm")
    log_dir = tempfile.mkdtemp(prefix="bench-small-logs-")
    prefix = callgrind(log_dir) if args.callgrind else ()
    grind_dir = log_dir if args.callgrind else None
    servers: list[Server] = []
    try:
        floor_proc, floor_url = start_baseline(
            "bench.upload", work, prefix=prefix, timeout_s=_CALLGRIND_START_S if prefix else 20
        )
        servers.append(
            Server(
                "raw ASGI + os.write (floor)",
                floor_url,
                floor_proc,
                floor=True,
                callgrind_dir=grind_dir,
            )
        )
        trees = [("envd", Path.cwd())] + ([("before", args.before)] if args.before else [])
        for label, tree in trees:
            proc, url = start_envd_from(tree, log_dir, prefix)
            servers.append(Server(f"{label} octet-stream", url, proc, callgrind_dir=grind_dir))
            servers.append(
                Server(f"{label} multipart", url, proc, multipart=True, callgrind_dir=grind_dir)
            )
        payload = os.urandom(args.size_kib * 1024)
        for _ in range(rounds):
            for server in servers:
                upload_batch(server, work, args.count, payload)
    finally:
        for proc in {id(s.proc): s.proc for s in servers}.values():
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)
    _report(servers, args.count, args.size_kib, rounds, "instructions" if prefix else "CPU ms")


if __name__ == "__main__":
    main()
