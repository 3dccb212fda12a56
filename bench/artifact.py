"""The self-contained artifact (packaging/build-artifact) against the venv install
(packaging/install.sh), both installed into temporary prefixes and measured in the same run,
interleaved, the order reversed every other round: start-up to READY=1, as wall clock and as the
CPU time envd has used by then (bench.startup; other load on the machine stretches the first,
hardly the second), idle RSS after start, B3 (Process/Start of `bash -l -c "echo x"` to its first
data event, raw HTTP/1.1 client: bench.process_start) and B4 (256 MiB of stdout, binary proto,
curl as the client: bench.process_stream), with envd's CPU time per MiB of it.

Run (root): .venv/bin/python -m bench.artifact TARBALL [--rounds 5]
Targets, artifact / venv: start-up <= 1.2x, RSS <= 1.2x, B3 and B4 throughput >= 0.95x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.process_start import COMMAND, RawStart
from bench.process_stream import MIB, start_request, with_curl
from bench.startup import start_to_ready
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from tests.envd_process import start_envd

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "packaging" / "install.sh"
B3_RUNS = 100
B4_BYTES = 256 * MIB


def install(base: Path, artifact: Path | None) -> list[str]:
    """install.sh into base (prefix, bin, units); returns the launcher as a command."""
    argv = [str(INSTALL), "--prefix", str(base / "prefix"), "--bin-dir", str(base / "bin")]
    argv += ["--unit-dir", str(base / "units")]
    if artifact is not None:
        argv += ["--artifact", str(artifact)]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    return [str(base / "bin" / "envd")]


def b3_p50_ms(port: int, home: str) -> float:
    request = StartRequest(
        process=ProcessConfig(cmd=COMMAND[0], args=COMMAND[1:], envs={"HOME": home, "LANG": "C"}),
        stdin=False,
    )
    raw = RawStart(port, request)
    try:
        for _ in range(10):  # warm-up
            raw.first_data()
        return statistics.median(raw.first_data() for _ in range(B3_RUNS)) * 1000
    finally:
        raw.close()


def one_round(kinds: dict[str, list[str]], tmp: Path, home: str) -> dict[str, dict[str, float]]:
    row: dict[str, dict[str, float]] = {}
    for kind, command in kinds.items():
        ready, ready_cpu = start_to_ready(command, tmp)
        # The spawn helper each install ships (the artifact's launcher sets it; the venv's
        # launcher too when this host has a static libc).
        daemon = start_envd(tmp, command=command)
        try:
            time.sleep(3)
            rss = daemon.rss_bytes() / MIB
            b3 = b3_p50_ms(daemon.port, home)
            cpu_before = daemon.cpu_seconds()
            b4 = with_curl(daemon.url, start_request(B4_BYTES, False), B4_BYTES, False)
            b4_cpu = (daemon.cpu_seconds() - cpu_before) * 1000 / (B4_BYTES / MIB)
        finally:
            daemon.stop()
        row[kind] = {
            "ready ms": ready,
            "ready CPU ms": ready_cpu,
            "RSS MiB": rss,
            "B3 p50 ms": b3,
            "B4 MiB/s": b4,
            # envd's own CPU per MiB streamed: what the throughput ratio is, less the load.
            "B4 CPU ms/MiB": b4_cpu,
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-artifact-") as tmp_name:
        tmp = Path(tmp_name)
        home = str(tmp / "home")
        shutil.copytree("/etc/skel", home)
        kinds = {
            "venv": install(tmp / "venv", None),
            "artifact": install(tmp / "artifact", args.artifact.resolve()),
        }
        order = list(kinds.items())
        rounds = [
            one_round(dict(order if i % 2 == 0 else order[::-1]), tmp, home)
            for i in range(args.rounds)
        ]
    print(
        f"{'median of ' + str(args.rounds) + ' rounds':<14} {'venv':>10} {'artifact':>10} {'ratio':>8}"
    )
    for metric in rounds[0]["venv"]:
        venv = statistics.median(r["venv"][metric] for r in rounds)
        art = statistics.median(r["artifact"][metric] for r in rounds)
        ratio = statistics.median(r["artifact"][metric] / r["venv"][metric] for r in rounds)
        print(f"{metric:<14} {venv:>10.1f} {art:>10.1f} {ratio:>7.2f}x")
    size = args.artifact.stat().st_size / MIB
    print(f"artifact size: {size:.1f} MiB compressed ({os.path.basename(args.artifact)})")


if __name__ == "__main__":
    main()
