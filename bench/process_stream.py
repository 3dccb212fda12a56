"""B4 / B4b: stream a child's output through Process/Start, against the raw read of the same
output in the same run.

B4: `head -c N /dev/zero` on pipes, proto and JSON codecs; baseline: 64 KiB os.read of the
pipe. B4b: the same through a PTY; baseline: 64 KiB os.read of a pty master.
The daemon's capacity is measured with curl as the client (it only counts bytes); the
connectrpc Python client, which decodes every event, is shown too: it is the slower side.
Each round measures the baselines and every row once; ratios are per round, then the median.
With --as-service, envd runs at the nice envd.service gives it (-20; its children still get 0)
and the bench, envd and every child share one core: a client on envd's core, as sandboxd's
local clients are.
Run: .venv/bin/python -m bench.process_stream [--mib 256] [--pty-mib 64] [--runs 5] [--as-service]
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
SERVICE_NICE = -20  # packaging/envd.service


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


def with_curl(url: str, request: StartRequest, size: int, json: bool) -> float:
    """MiB/s of the child's output (not of the framing or the base64 around it), with curl as
    the client: it only counts the bytes it receives."""
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
    elapsed = time.perf_counter() - started
    assert int(result.stdout) > size, (result.stdout, size)
    return size / MIB / elapsed


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


def one_round(url: str, size: int, pty_size: int) -> dict[str, tuple[float, float]]:
    """Every row once, each as (MiB/s, ratio to its baseline measured in this same round):
    on a noisy machine the baseline swings 2x between rounds, so ratios are taken per round."""
    pipe, pty = start_request(size, False), start_request(pty_size, True)
    pipe_base, pty_base = raw_pipe(size), raw_pty(pty_size)
    pipe_rows = {
        "B4 envd proto, curl": with_curl(url, pipe, size, False),
        "B4 envd JSON, curl": with_curl(url, pipe, size, True),
        "B4 envd proto, connectrpc": asyncio.run(
            through_envd(url, proto_binary_codec(), size, False)
        ),
        "B4 envd JSON, connectrpc": asyncio.run(through_envd(url, proto_json_codec(), size, False)),
    }
    pty_rows = {
        "B4b envd PTY proto, curl": with_curl(url, pty, pty_size, False),
        "B4b envd PTY, connectrpc": asyncio.run(
            through_envd(url, proto_binary_codec(), pty_size, True)
        ),
    }
    return {
        "raw pipe, 64 KiB reads": (pipe_base, 1.0),
        **{name: (rate, rate / pipe_base) for name, rate in pipe_rows.items()},
        "raw pty, 64 KiB reads": (pty_base, 1.0),
        **{name: (rate, rate / pty_base) for name, rate in pty_rows.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--pty-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--as-service", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        if args.as_service:
            # Inherited from birth by envd and every thread and child it makes (a renice or
            # repin afterwards reaches only the thread it names).
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            os.setpriority(os.PRIO_PROCESS, 0, SERVICE_NICE)
        daemon = start_envd(Path(tmp))
        os.setpriority(os.PRIO_PROCESS, 0, 0)
        try:
            rounds = [
                one_round(daemon.url, args.mib * MIB, args.pty_mib * MIB) for _ in range(args.runs)
            ]
        finally:
            daemon.stop()
    print(f"{'stream (median of ' + str(args.runs) + ' rounds)':30} {'MiB/s':>8} {'ratio':>7}")
    for name in rounds[0]:
        rate = statistics.median(r[name][0] for r in rounds)
        ratio = statistics.median(r[name][1] for r in rounds)
        print(f"{name:30} {rate:8.0f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
