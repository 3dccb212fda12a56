"""B2b: the Python SDK's `sandbox.files.read()` of a hot 64 MiB file, random data and source
text, against envd and two minimal raw-ASGI apps in the same run, rounds interleaved.

The SDK's HTTP client asks for `Accept-Encoding: gzip, deflate` on every read, so what envd
does with that header decides the rate. Servers, each read by the unmodified SDK (debug mode,
`sandbox_url` pointing at it; bench/sdk_reader.py, run with tests/sdk/.venv):
- identity: 1 MiB `os.pread` chunks, never compressed: the identity download (the baseline);
- level 6: zlib level 6 in a worker thread per 1 MiB chunk, as Go's compress/gzip in the
  reference (and envd before it chose the encoding per file);
- envd.
Random data is read as `format="bytes"`, text with the default `format="text"` (whose UTF-8
decoding costs the client about as much as the rest of the read) and as bytes. Per variant: the
SDK's MiB/s (median [range]), the median of per-round ratios to identity, the server's and the
client's CPU ms per MiB, and the bytes on the wire.

Targets: random data ≥ 0.8x identity; source text ≥ 3x level 6, with a body within 15% of
level 6's size.
Run: .venv/bin/python -m bench.sdk_read [--size-mib 64] [--runs 5]   (needs scripts/test-sdk's
SDK virtualenv, tests/sdk/.venv)
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.idle import cpu_seconds
from bench.sdk_process import SdkProcess
from bench.transfer import MIB, make_payload, start_baseline, stop, transfer_main
from tests.envd_process import start_envd

if TYPE_CHECKING:
    from collections.abc import Iterator

READ_CHUNK_BYTES = MIB
SDK_HEADERS = {"Accept-Encoding": "gzip, deflate"}  # what the SDK's httpx client sends


def serve_baseline(port: int, _unused: str) -> None:
    """`/identity/files?path=` serves the file as is, `/level6/files?path=` gzips it."""
    import zlib
    from urllib.parse import parse_qs

    import anyio.to_thread
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        query = parse_qs(scope["query_string"].decode())
        if "path" not in query:  # start_baseline's readiness probe
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        path = query["path"][0]
        gzip = scope["path"].startswith("/level6/")
        size = os.path.getsize(path)
        headers = [(b"content-encoding", b"gzip")] if gzip else [(b"content-length", b"%d" % size)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(READ_CHUNK_BYTES):
                if gzip:
                    chunk = await anyio.to_thread.run_sync(compressor.compress, chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": compressor.flush() if gzip else b""})

    uvicorn.run(app, port=port, loop="uvloop", http="httptools", log_level="warning")


@dataclass
class Variant:
    """One server reading one payload: per-round figures."""

    name: str
    url: str
    pid: int
    rates: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)  # ms per MiB
    client_cpu: list[float] = field(default_factory=list)  # ms per MiB
    wire_bytes: int = 0
    encoding: str = ""


class SdkReader(SdkProcess):
    """The SDK client process: one `files.read` per request line."""

    def __init__(self) -> None:
        super().__init__("sdk_reader.py")

    def read(self, url: str, path: str, read_format: str) -> tuple[float, float, int, str]:
        wall, cpu, length, digest = self.ask(url, path, read_format)
        return float(wall), float(cpu), int(length), digest


def source_text(size: int) -> Iterator[bytes]:
    """`size` bytes of Python source: the standard library's UTF-8 .py files, over and over."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    left = size
    while True:
        for path in files:
            data = path.read_bytes()
            try:
                data.decode()
            except UnicodeDecodeError:
                continue
            data = data[:left]
            left -= len(data)
            yield data
            if not left:
                return


def measure(reader: SdkReader, variant: Variant, path: str, fmt: str, digest: str) -> None:
    before = cpu_seconds(variant.pid)
    wall, client_cpu, length, got = reader.read(variant.url, path, fmt)
    server_cpu = cpu_seconds(variant.pid) - before
    if got != digest:
        raise RuntimeError(f"{variant.name}: the SDK read {length} bytes that differ from {path}")
    mib = length / MIB
    variant.rates.append(mib / wall)
    variant.server_cpu.append(server_cpu * 1000 / mib)
    variant.client_cpu.append(client_cpu * 1000 / mib)


def on_the_wire(variant: Variant, path: str) -> None:
    """The body's size and encoding for the SDK's Accept-Encoding, read once outside the timing."""
    params = {"path": path}
    with httpx.stream("GET", f"{variant.url}/files", params=params, headers=SDK_HEADERS) as r:
        r.raise_for_status()
        variant.wire_bytes = sum(len(chunk) for chunk in r.iter_raw())
        variant.encoding = r.headers.get("content-encoding", "identity")


def print_payload(title: str, variants: list[Variant], size: int) -> None:
    identity = variants[0]
    print(
        f"\n{title}\n| server | SDK MiB/s median [range] | ratio to identity (per-round median) "
        "| server CPU ms/MiB | client CPU ms/MiB | body on the wire |\n|---|---|---|---|---|---|"
    )
    for v in variants:
        ratios = [rate / base for rate, base in zip(v.rates, identity.rates, strict=True)]
        print(
            f"| {v.name} | {statistics.median(v.rates):.0f} [{min(v.rates):.0f}-"
            f"{max(v.rates):.0f}] | {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] | {statistics.median(v.server_cpu):.2f} | "
            f"{statistics.median(v.client_cpu):.2f} | {v.encoding}, "
            f"{v.wire_bytes / size:.3f} of the file |"
        )
    level6, envd = variants[1], variants[2]
    speedups = [e / z for e, z in zip(envd.rates, level6.rates, strict=True)]
    print(
        f"envd vs level 6: {statistics.median(speedups):.2f}x the rate "
        f"[{min(speedups):.2f}-{max(speedups):.2f}], "
        f"{envd.wire_bytes / level6.wire_bytes:.3f}x the bytes"
    )


def run(size: int, runs: int, work: str, log_dir: str) -> None:
    random_data, text = f"{work}/random.bin", f"{work}/source.txt"
    make_payload(random_data, size)
    with open(text, "wb") as f:
        f.writelines(source_text(size))
    payloads = {
        "random data, format=bytes": (random_data, "bytes"),
        "source text, format=text (the default)": (text, "text"),
        "source text, format=bytes": (text, "bytes"),
    }
    digests = {
        name: hashlib.sha256(Path(path).read_bytes()).hexdigest()
        for name, (path, _) in payloads.items()
    }
    baseline_proc, baseline_url = start_baseline("bench.sdk_read", "-")
    envd = start_envd(Path(log_dir))
    reader = SdkReader()
    try:
        results: dict[str, list[Variant]] = {}
        for name, (path, _) in payloads.items():
            results[name] = [
                Variant("identity (baseline)", f"{baseline_url}/identity", baseline_proc.pid),
                Variant("level 6 (reference)", f"{baseline_url}/level6", baseline_proc.pid),
                Variant("envd", envd.url, envd.pid),
            ]
            for variant in results[name]:
                on_the_wire(variant, path)
        for index in range(runs):
            for name, (path, fmt) in payloads.items():
                variants = results[name]
                # Rotate the order so that no server always goes first (or right after GC).
                for variant in variants[index % 3 :] + variants[: index % 3]:
                    measure(reader, variant, path, fmt, digests[name])
    finally:
        reader.close()
        envd.stop()
        stop(baseline_proc)
    for name, variants in results.items():
        print_payload(
            f"B2b SDK files.read, {size // MIB} MiB {name}, {runs} rounds", variants, size
        )


def main() -> None:
    transfer_main(__doc__, "bench-sdk-read", "UNUSED", serve_baseline, run, default_size_mib=64)


if __name__ == "__main__":
    main()
