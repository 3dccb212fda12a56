"""B1: POST /files upload throughput with curl, octet-stream and multipart, against a minimal
raw-ASGI app (uvicorn, uvloop + httptools) that os.write()s each body chunk, measured in the
same run; plus envd's peak RSS (VmHWM) over its idle RSS.

Payload and destination live on tmpfs (/dev/shm) so the disk's noise stays out.
Run: .venv/bin/python -m bench.upload [--size-mib 1024] [--runs 5]   (needs curl)
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx

from bench.transfer import (
    MIB,
    Series,
    curl_seconds,
    make_payload,
    print_table,
    rss_mib,
    start_baseline,
    stop,
    transfer_main,
)
from tests.envd_process import start_envd

OCTET = {"Content-Type": "application/octet-stream"}

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def serve_baseline(port: int, directory: str) -> None:
    """The minimal app; `/threaded` writes through a worker thread per chunk instead, to show
    what that hop would cost envd."""
    import anyio.to_thread
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "POST":
            fd = os.open(f"{directory}/baseline.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                more = True
                while more:
                    message = await receive()
                    if scope["path"] == "/threaded":
                        await anyio.to_thread.run_sync(os.write, fd, message.get("body", b""))
                    else:
                        os.write(fd, message.get("body", b""))
                    more = message.get("more_body", False)
            finally:
                os.close(fd)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"[]"})

    uvicorn.run(app, port=port, loop="uvloop", http="httptools", log_level="warning")


def main() -> None:
    transfer_main(__doc__, "bench-upload", "DIR", serve_baseline, run)


def run(size: int, runs: int, work: str, log_dir: str) -> None:
    from pathlib import Path

    payload = f"{work}/payload.bin"
    make_payload(payload, size)
    baseline_proc, baseline_url = start_baseline("bench.upload", work)
    envd = start_envd(Path(log_dir))
    idle_rss = rss_mib(envd.pid, "VmRSS")
    baseline = Series("raw ASGI + os.write (baseline)")
    threaded = Series("raw ASGI + os.write in a thread per chunk")
    raw = Series("envd octet-stream")
    multipart = Series("envd multipart")
    httpx_baseline = Series("httpx client: raw ASGI + os.write (baseline)")
    httpx_raw = Series("httpx client: envd octet-stream")
    target = f"{work}/uploaded.bin"
    raw_args = ["-X", "POST", "-H", "Content-Type: application/octet-stream", "-T", payload]
    try:
        for _ in range(runs):
            seconds = curl_seconds(*raw_args, f"{baseline_url}/upload")
            baseline.rates.append(size / MIB / seconds)
            _remove(f"{work}/baseline.bin")
            seconds = curl_seconds(*raw_args, f"{baseline_url}/threaded")
            threaded.rates.append(size / MIB / seconds)
            _remove(f"{work}/baseline.bin")
            seconds = curl_seconds(*raw_args, f"{envd.url}/files?path={target}")
            raw.rates.append(size / MIB / seconds)
            _remove(target)
            seconds = curl_seconds("-F", f"file=@{payload};filename={target}", f"{envd.url}/files")
            multipart.rates.append(size / MIB / seconds)
            _check_size(Path(target), size)
            _remove(target)
            seconds = httpx_seconds(payload, f"{baseline_url}/upload")
            httpx_baseline.rates.append(size / MIB / seconds)
            _remove(f"{work}/baseline.bin")
            seconds = httpx_seconds(payload, f"{envd.url}/files?path={target}")
            httpx_raw.rates.append(size / MIB / seconds)
            _remove(target)
        peak_rss = rss_mib(envd.pid, "VmHWM")
    finally:
        envd.stop()
        stop(baseline_proc)
    print_table(
        f"B1 upload, {size // MIB} MiB, curl, median of {runs}",
        [baseline, threaded, raw, multipart],
        baseline,
    )
    print_table(
        f"B1 upload, {size // MIB} MiB, httpx (what the Python SDK uses), median of {runs}",
        [httpx_baseline, httpx_raw],
        httpx_baseline,
    )
    print(
        f"\nenvd RSS: idle {idle_rss:.0f} MiB, peak (VmHWM) {peak_rss:.0f} MiB, "
        f"growth {peak_rss - idle_rss:.0f} MiB (target <= 64)"
    )


def httpx_seconds(payload: str, url: str) -> float:
    """Stream the payload file in 1 MiB chunks with httpx and time the request."""

    def chunks() -> Iterator[bytes]:
        with open(payload, "rb") as f:
            while chunk := f.read(MIB):
                yield chunk

    start = time.perf_counter()
    httpx.post(url, content=chunks(), headers=OCTET, timeout=600).raise_for_status()
    return time.perf_counter() - start


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)


def _check_size(path: Path, size: int) -> None:
    if path.stat().st_size != size:
        sys.exit(f"upload of {path} has {path.stat().st_size} bytes, expected {size}")


if __name__ == "__main__":
    main()
