"""B2: GET /files download throughput of a hot file with curl, against a minimal raw-ASGI app
(uvicorn, uvloop + httptools) reading the same file in 1 MiB chunks, measured in the same
run; plus envd's gzip of the same random data for reference. With `Accept-Encoding: gzip` that
data would go out as identity (it does not compress), so the gzip row rejects identity to
measure the compressor; bench.sdk_read measures the encoding choice with the SDK.

The file lives on tmpfs (/dev/shm), so it is always "hot".
Run: .venv/bin/python -m bench.download [--size-mib 1024] [--runs 5]   (needs curl)
"""

from __future__ import annotations

import os
from typing import Any

from bench.transfer import (
    MIB,
    Series,
    curl_seconds,
    make_payload,
    print_table,
    start_baseline,
    stop,
    transfer_main,
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
    transfer_main(__doc__, "bench-download", "FILE", serve_baseline, run)


def run(size: int, runs: int, work: str, log_dir: str) -> None:
    from pathlib import Path

    payload = f"{work}/payload.bin"
    make_payload(payload, size)
    baseline_proc, baseline_url = start_baseline("bench.download", payload)
    envd = start_envd(Path(log_dir))
    baseline = Series("raw ASGI, 1 MiB os.read (baseline)")
    identity = Series("envd identity")
    gzipped = Series("envd gzip forced by identity;q=0 (random data, CPU-bound)")
    try:
        for index in range(runs):
            baseline.rates.append(size / MIB / curl_seconds(f"{baseline_url}/download"))
            url = f"{envd.url}/files?path={payload}"
            identity.rates.append(size / MIB / curl_seconds(url))
            if index == 0:  # slow and only for reference: once is enough
                forced = ("-H", "Accept-Encoding: gzip, identity;q=0")
                gzipped.rates.append(size / MIB / curl_seconds(*forced, url))
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
