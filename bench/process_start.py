"""B3: Process/Start of `/bin/bash -l -c "echo x"` until the first data event, against the same
command run bare (Popen until its first byte) in the same run, interleaved.

HOME is a copy of /etc/skel and LANG=C, so bash's login profile is the stock Debian one.
Two daemons are measured: with the spawn helper (default) and with the Python fallback; the
first with three clients, because the async connectrpc client alone adds about 1 ms.
Run: .venv/bin/python -m bench.process_start [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from connectrpc.codec import proto_binary_codec

from envd._gen.process.process_connect import ProcessClient, ProcessClientSync
from envd._gen.process.process_pb import ProcessConfig, StartRequest, StartResponse
from envd.process.spawn_helper import ensure_helper
from tests.envd_process import EnvdProcess, start_envd

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

COMMAND = ["/bin/bash", "-l", "-c", "echo x"]


def bare_first_byte(env: dict[str, str]) -> float:
    started = time.perf_counter()
    child = subprocess.Popen(COMMAND, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    assert child.stdout is not None
    child.stdout.read(1)
    elapsed = time.perf_counter() - started
    child.stdout.read()
    child.stdout.close()
    child.wait()
    return elapsed


def _is_data(response: StartResponse) -> bool:
    event = response.event.event if response.event is not None else None
    return event is not None and event.field == "data"


async def envd_first_data(client: ProcessClient, request: StartRequest) -> float:
    started = time.perf_counter()
    elapsed = 0.0
    async for response in client.start(request):
        if _is_data(response) and not elapsed:
            elapsed = time.perf_counter() - started
    return elapsed


def envd_first_data_sync(client: ProcessClientSync, request: StartRequest) -> float:
    started = time.perf_counter()
    elapsed = 0.0
    for response in client.start(request):
        if _is_data(response) and not elapsed:
            elapsed = time.perf_counter() - started
    return elapsed


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


class RawStart:
    """Start over one kept-alive HTTP/1.1 connection, with no client library: the figure the
    daemon itself is responsible for."""

    # ProcessEvent.data{stdout: "x\n"}, as it appears in the response body.
    DATA_EVENT: Final = b"\x12\x04\n\x02x\n"
    LAST_CHUNK: Final = b"\r\n0\r\n\r\n"

    def __init__(self, port: int, request: StartRequest) -> None:
        body = request.to_binary()
        envelope = b"\0" + struct.pack(">I", len(body)) + body
        self._request = (
            b"POST /process.Process/Start HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/connect+proto\r\n"
            b"Content-Length: %d\r\n\r\n" % len(envelope)
        ) + envelope
        self._socket = socket.create_connection(("127.0.0.1", port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def first_data(self) -> float:
        started = time.perf_counter()
        self._socket.sendall(self._request)
        received, elapsed = b"", 0.0
        while not received.endswith(self.LAST_CHUNK):
            chunk = self._socket.recv(65536)
            assert chunk, "envd closed the connection"
            received += chunk
            if not elapsed and self.DATA_EVENT in received:
                elapsed = time.perf_counter() - started
        return elapsed

    def close(self) -> None:
        self._socket.close()


async def measure(daemons: dict[str, EnvdProcess], runs: int, home: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": home, "LANG": "C", "USER": "root", "LOGNAME": "root"}
    request = StartRequest(
        process=ProcessConfig(cmd=COMMAND[0], args=COMMAND[1:], envs={"HOME": home, "LANG": "C"}),
        stdin=False,
    )
    helper, fallback = daemons["helper"], daemons["fallback"]
    async_client = ProcessClient(helper.url, codec=proto_binary_codec(), send_compression=None)
    fallback_client = ProcessClient(fallback.url, codec=proto_binary_codec(), send_compression=None)
    sync_client = ProcessClientSync(helper.url, codec=proto_binary_codec(), send_compression=None)
    raw = RawStart(helper.port, request)

    async def in_loop(probe: Callable[[], float]) -> float:
        return probe()

    # Interleaved, so every row sees the same machine load.
    probes: dict[str, Callable[[], Awaitable[float]]] = {
        "bare bash -l": lambda: in_loop(lambda: bare_first_byte(env)),
        "envd, connectrpc async client": lambda: envd_first_data(async_client, request),
        "envd, connectrpc sync client": lambda: in_loop(
            lambda: envd_first_data_sync(sync_client, request)
        ),
        "envd, raw HTTP/1.1 client": lambda: in_loop(raw.first_data),
        "envd Python fallback, async client": lambda: envd_first_data(fallback_client, request),
    }
    samples: dict[str, list[float]] = {name: [] for name in probes}
    for run in range(10 + runs):  # 10 warm-up runs
        for name, probe in probes.items():
            elapsed = await probe()
            if run >= 10:
                samples[name].append(elapsed)
    await async_client.close()
    await fallback_client.close()
    sync_client.close()
    raw.close()
    base50, base99 = pct(samples["bare bash -l"], 50), pct(samples["bare bash -l"], 99)
    print(f"{'B3 start to first data':36} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>7} {'+p99':>7}")
    for name, values in samples.items():
        p50, p99 = pct(values, 50), pct(values, 99)
        print(f"{name:36} {p50:8.2f} {p99:8.2f} {p50 - base50:7.2f} {p99 - base99:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    helper = ensure_helper()
    assert helper is not None, "the spawn helper could not be built"
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        home = str(Path(tmp) / "home")
        shutil.copytree("/etc/skel", home)
        daemons = {
            "helper": start_envd(Path(tmp), env={"ENVD_SPAWN_HELPER": helper}),
            "fallback": start_envd(Path(tmp), env={"ENVD_SPAWN_HELPER": "off"}),
        }
        try:
            asyncio.run(measure(daemons, args.runs, home))
        finally:
            for daemon in daemons.values():
                daemon.stop()


if __name__ == "__main__":
    main()
