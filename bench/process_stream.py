"""B4 / B4b: stream a child's output through Process/Start, against the raw read of the same
output in the same run.

B4: `head -c N /dev/zero` on pipes, proto and JSON codecs; baseline: 64 KiB os.read of the
pipe. B4b: the same through a PTY; baseline: 64 KiB os.read of a pty master.
The daemon's capacity is measured with curl as the client (it only counts bytes); the
connectrpc Python client, which decodes every event, is shown too: it is the slower side.
Run: .venv/bin/python -m bench.process_stream [--mib 256] [--pty-mib 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from connectrpc.codec import Codec, proto_binary_codec, proto_json_codec

from envd._gen.process.process_connect import ProcessClient
from envd._gen.process.process_pb import PTY, ProcessConfig, StartRequest
from tests.envd_process import start_envd

MIB = 1024 * 1024
READ_BYTES = 64 * 1024


def raw_pipe(size: int) -> float:
    started = time.perf_counter()
    child = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
    assert child.stdout is not None
    fd = child.stdout.fileno()
    total = 0
    while data := os.read(fd, READ_BYTES):
        total += len(data)
    elapsed = time.perf_counter() - started
    child.stdout.close()
    child.wait()
    assert total == size
    return size / MIB / elapsed


def raw_pty(size: int) -> float:
    master, slave = os.openpty()
    started = time.perf_counter()
    child = subprocess.Popen(
        ["head", "-c", str(size), "/dev/zero"], stdout=slave, start_new_session=True
    )
    os.close(slave)
    total = 0
    while True:
        try:
            data = os.read(master, READ_BYTES)
        except OSError as exc:  # EIO: the slave side closed
            if exc.errno != errno.EIO:
                raise
            break
        if not data:
            break
        total += len(data)
    elapsed = time.perf_counter() - started
    os.close(master)
    child.wait()
    assert total == size
    return size / MIB / elapsed


def with_curl(url: str, request: StartRequest, json: bool) -> float:
    """MiB/s of the response body (framing included) as curl receives it."""
    if json:
        content_type, body = "application/connect+json", request.to_json().encode()
    else:
        content_type, body = "application/connect+proto", request.to_binary()
    envelope = b"\0" + struct.pack(">I", len(body)) + body
    started = time.perf_counter()
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
            "-H",
            f"Content-Type: {content_type}",
            "--data-binary",
            "@-",
            f"{url}/process.Process/Start",
        ],
        input=envelope,
        capture_output=True,
        check=True,
    )
    return int(result.stdout) / MIB / (time.perf_counter() - started)


def start_request(size: int, pty: bool) -> StartRequest:
    config = ProcessConfig(cmd="head", args=["-c", str(size), "/dev/zero"])
    if pty:
        return StartRequest(process=config, pty=PTY(size=PTY.Size(cols=80, rows=24)))
    return StartRequest(process=config, stdin=False)


async def through_envd(url: str, codec: Codec, size: int, pty: bool) -> float:
    request = start_request(size, pty)
    total = 0
    async with ProcessClient(
        url, codec=codec, send_compression=None, read_max_bytes=64 * MIB
    ) as client:
        started = time.perf_counter()
        async for response in client.start(request):
            event = response.event.event if response.event is not None else None
            if event is not None and event.field == "data":
                total += len(event.value.output.value)  # type: ignore[union-attr]
        elapsed = time.perf_counter() - started
    assert total == size, (total, size)
    return size / MIB / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--pty-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size, pty_size = args.mib * MIB, args.pty_mib * MIB
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        daemon = start_envd(Path(tmp))
        try:
            runs = range(args.runs)
            pipe, pty = start_request(size, False), start_request(pty_size, True)
            rows = {
                "raw pipe, 64 KiB reads": [raw_pipe(size) for _ in runs],
                "B4 envd proto, curl": [with_curl(daemon.url, pipe, False) for _ in runs],
                "B4 envd JSON, curl": [with_curl(daemon.url, pipe, True) for _ in runs],
                "B4 envd proto, connectrpc": [
                    asyncio.run(through_envd(daemon.url, proto_binary_codec(), size, False))
                    for _ in runs
                ],
                "B4 envd JSON, connectrpc": [
                    asyncio.run(through_envd(daemon.url, proto_json_codec(), size, False))
                    for _ in runs
                ],
                "raw pty, 64 KiB reads": [raw_pty(pty_size) for _ in runs],
                "B4b envd PTY proto, curl": [with_curl(daemon.url, pty, False) for _ in runs],
                "B4b envd PTY, connectrpc": [
                    asyncio.run(through_envd(daemon.url, proto_binary_codec(), pty_size, True))
                    for _ in runs
                ],
            }
        finally:
            daemon.stop()
    medians = {name: statistics.median(values) for name, values in rows.items()}
    print(f"{'stream (median of ' + str(args.runs) + ')':30} {'MiB/s':>8} {'ratio':>7}")
    for name, value in medians.items():
        base = medians[
            "raw pty, 64 KiB reads" if "PTY" in name or "pty" in name else "raw pipe, 64 KiB reads"
        ]
        print(f"{name:30} {value:8.0f} {value / base:7.2f}")


if __name__ == "__main__":
    main()
