"""B3: Process/Start of `/bin/bash -l -c "echo x"` until the first data event, against the same
command run bare (Popen until its first byte) in the same run, interleaved.

HOME is a copy of /etc/skel and LANG=C, so bash's login profile is the stock Debian one.
Two daemons are measured: with the spawn helper (default) and with the Python fallback.
Run: .venv/bin/python -m bench.process_start [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from connectrpc.codec import proto_binary_codec

from envd._gen.process.process_connect import ProcessClient, ProcessClientSync
from envd._gen.process.process_pb import ProcessConfig, StartRequest, StartResponse
from envd.process.helper import ensure_helper
from tests.envd_process import EnvdProcess, start_envd

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


async def measure(daemons: dict[str, EnvdProcess], runs: int, home: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": home, "LANG": "C", "USER": "root", "LOGNAME": "root"}
    request = StartRequest(
        process=ProcessConfig(cmd=COMMAND[0], args=COMMAND[1:], envs={"HOME": home, "LANG": "C"}),
        stdin=False,
    )
    clients = {
        name: ProcessClient(d.url, codec=proto_binary_codec(), send_compression=None)
        for name, d in daemons.items()
    }
    # The sync client (as the SDKs' default Sandbox) spends less of the figure in itself.
    helper_url = daemons["envd (spawn helper)"].url
    sync_client = ProcessClientSync(helper_url, codec=proto_binary_codec(), send_compression=None)
    sync_name = "envd (spawn helper), sync client"
    samples: dict[str, list[float]] = {"bare bash -l": [], **{name: [] for name in daemons}}
    samples[sync_name] = []
    for run in range(10 + runs):  # 10 warm-up runs
        measured = {"bare bash -l": bare_first_byte(env)}
        for name, client in clients.items():
            measured[name] = await envd_first_data(client, request)
        measured[sync_name] = envd_first_data_sync(sync_client, request)
        if run >= 10:
            for name, value in measured.items():
                samples[name].append(value)
    for client in clients.values():
        await client.close()
    sync_client.close()
    base50, base99 = pct(samples["bare bash -l"], 50), pct(samples["bare bash -l"], 99)
    print(f"{'B3 start to first data':34} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>7} {'+p99':>7}")
    for name, values in samples.items():
        p50, p99 = pct(values, 50), pct(values, 99)
        print(f"{name:34} {p50:8.2f} {p99:8.2f} {p50 - base50:7.2f} {p99 - base99:7.2f}")


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
            "envd (spawn helper)": start_envd(Path(tmp), env={"ENVD_SPAWN_HELPER": helper}),
            "envd (Python fallback)": start_envd(Path(tmp), env={"ENVD_SPAWN_HELPER": "off"}),
        }
        try:
            asyncio.run(measure(daemons, args.runs, home))
        finally:
            for daemon in daemons.values():
                daemon.stop()


if __name__ == "__main__":
    main()
