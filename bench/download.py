"""B2: GET /files download throughput of a hot file with curl, against a minimal raw-ASGI app
(uvicorn, uvloop + httptools) reading the same file in 1 MiB chunks, measured in the same
run; plus envd's gzip download for reference.

The file lives on tmpfs (/dev/shm), so it is always "hot".
Run: .venv/bin/python -m bench.download [--size-mib 1024] [--runs 5]   (needs curl)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

from bench.transfer import (
    MIB,
    Series,
    curl_seconds,
    make_payload,
    print_table,
    start_baseline,
    stop,
)
from tests.envd_process import start_envd

READ_CHUNK_BYTES = MIB


def serve_baseline(port: int, path: str) -> None:
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        size = os.path.getsize(path)
        headers = [(b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(READ_CHUNK_BYTES):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    uvicorn.run(app, port=port, loop="uvloop", http="httptools", log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--serve-baseline", nargs=2, metavar=("PORT", "FILE"))
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(int(args.serve_baseline[0]), args.serve_baseline[1])
        return
    work = tempfile.mkdtemp(prefix="bench-download-", dir="/dev/shm")
    log_dir = tempfile.mkdtemp(prefix="bench-download-logs-")
    try:
        run(args.size_mib * MIB, args.runs, work, log_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)


def run(size: int, runs: int, work: str, log_dir: str) -> None:
    from pathlib import Path

    payload = f"{work}/payload.bin"
    make_payload(payload, size)
    baseline_proc, baseline_url = start_baseline("bench.download", payload)
    envd = start_envd(Path(log_dir))
    baseline = Series("raw ASGI, 1 MiB os.read (baseline)")
    identity = Series("envd identity")
    gzipped = Series("envd gzip (random data, CPU-bound)")
    try:
        for index in range(runs):
            baseline.rates.append(size / MIB / curl_seconds(f"{baseline_url}/download"))
            url = f"{envd.url}/files?path={payload}"
            identity.rates.append(size / MIB / curl_seconds(url))
            if index == 0:  # slow and only for reference: once is enough
                gzipped.rates.append(size / MIB / curl_seconds("-H", "Accept-Encoding: gzip", url))
    finally:
        envd.stop()
        stop(baseline_proc)
    print_table(
        f"B2 download, {size // MIB} MiB hot file, curl, median of {runs}",
        [baseline, identity, gzipped],
        baseline,
    )


if __name__ == "__main__":
    main()
