"""B5: Filesystem/Stat requests per second and latency, envd vs a minimal connectrpc app
serving the same lstat-based Stat, both measured with wrk in this run.

With `--before TREE` (an older envd source tree, e.g. a `git archive` of an earlier commit),
that envd is measured too, interleaved, and each row gains its rps ratio to it.

Run: .venv/bin/python -m bench.stat [--seconds 3] [--runs 5] [--before TREE]   (needs `wrk`)
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench.small_uploads import start_envd_from
from bench.transfer import stop
from tests.envd_process import free_port, start_envd

if TYPE_CHECKING:
    from connectrpc.request import RequestContext

    from envd._gen.filesystem.filesystem_pb import StatRequest, StatResponse

log = logging.getLogger("bench.stat")

STAT_PATH = "/filesystem.Filesystem/Stat"
BODIES = {
    "json": ("application/json", '{"path":"/tmp"}'),
    # StatRequest{path: "/tmp"} in the binary encoding.
    "proto": ("application/proto", "\\n\\4/tmp"),
}
WRK_ARGS = ("wrk", "-t1", "--latency")
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "{content_type}"
wrk.body = '{body}'
"""


def serve_baseline(port: int) -> None:
    """The minimal app: connectrpc + uvicorn(uvloop, httptools), Stat doing lstat + names."""
    import grp
    import pwd

    import uvicorn

    from envd._gen.filesystem.filesystem_connect import Filesystem, FilesystemASGIApplication
    from envd._gen.filesystem.filesystem_pb import EntryInfo, StatResponse

    class MinimalStat(Filesystem):
        async def stat(
            self, request: StatRequest, ctx: RequestContext[StatRequest, StatResponse]
        ) -> StatResponse:
            st = os.lstat(request.path)
            return StatResponse(
                entry=EntryInfo(
                    name=os.path.basename(request.path),
                    path=request.path,
                    size=st.st_size,
                    mode=st.st_mode & 0o777,
                    owner=pwd.getpwuid(st.st_uid).pw_name,
                    group=grp.getgrgid(st.st_gid).gr_name,
                )
            )

    app = FilesystemASGIApplication(MinimalStat())
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


def _start_baseline() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.stat", "--serve-baseline", str(port)])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("baseline app did not start")


def _check_answers(url: str) -> None:
    r = httpx.post(url + STAT_PATH, json={"path": "/tmp"})
    r.raise_for_status()


def _parse_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unexpected wrk latency {text!r}")
    value, unit = match.groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def run_wrk(url: str, codec: str, connections: int, seconds: int) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) of one wrk run."""
    content_type, body = BODIES[codec]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(LUA.format(content_type=content_type, body=body))
    try:
        out = subprocess.run(
            [*WRK_ARGS, f"-c{connections}", f"-d{seconds}s", "-s", script.name, url + STAT_PATH],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]  # wrk's format
    p50 = _parse_ms(re.search(r"^\s+50%\s+(\S+)", out, re.MULTILINE).group(1))  # type: ignore[union-attr]  # wrk's format
    p99 = _parse_ms(re.search(r"^\s+99%\s+(\S+)", out, re.MULTILINE).group(1))  # type: ignore[union-attr]  # wrk's format
    return rps, p50, p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older envd source tree to compare")
    parser.add_argument("--serve-baseline", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(args.serve_baseline)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    logs = Path(tempfile.mkdtemp(prefix="bench-stat-"))
    envd = start_envd(logs)
    baseline, baseline_url = _start_baseline()
    before = start_envd_from(args.before, str(logs)) if args.before else None
    try:
        _check_answers(envd.url)
        _check_answers(baseline_url)
        log.info(
            "| codec | c | envd rps | minimal rps | ratio | envd p50 ms | minimal p50 ms "
            "| envd p99 ms | before rps | ratio to before |"
        )
        log.info("|---|---|---|---|---|---|---|---|---|---|")
        for codec in ("json", "proto"):
            for connections in (1, 16):
                ours, theirs, older = [], [], []
                for _ in range(args.runs):  # interleaved, so drift hits both alike
                    ours.append(run_wrk(envd.url, codec, connections, args.seconds))
                    theirs.append(run_wrk(baseline_url, codec, connections, args.seconds))
                    if before is not None:
                        older.append(run_wrk(before[1], codec, connections, args.seconds))
                rps = statistics.median(r[0] for r in ours)
                base_rps = statistics.median(r[0] for r in theirs)
                before_rps = statistics.median(r[0] for r in older) if older else float("nan")
                log.info(
                    "| %s | %d | %.0f | %.0f | %.2fx | %.3f | %.3f | %.3f | %.0f | %.2fx |",
                    codec,
                    connections,
                    rps,
                    base_rps,
                    rps / base_rps,
                    statistics.median(r[1] for r in ours),
                    statistics.median(r[1] for r in theirs),
                    statistics.median(r[2] for r in ours),
                    before_rps,
                    rps / before_rps,
                )
    finally:
        baseline.terminate()
        baseline.wait()
        if before is not None:
            stop(before[0])
        envd.stop()
        shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
