"""B8 (process part): envd's RSS idle, with 1000 concurrent Start streams of `sleep 10`, and
its growth over 1000 start/exit cycles plus 1000 streams aborted mid-output (after a warm-up
of the same work, so one-time allocations are not counted as a leak).
Run: .venv/bin/python -m bench.process_memory
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from connectrpc.codec import proto_binary_codec

from envd._gen.process.process_connect import ProcessClient
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from tests.envd_process import EnvdProcess, start_envd

MIB = 1024 * 1024
BATCH = 50


def sh(script: str) -> StartRequest:
    return StartRequest(process=ProcessConfig(cmd="/bin/sh", args=["-c", script]), stdin=False)


async def concurrent_peak(client: ProcessClient, daemon: EnvdProcess, count: int) -> int:
    started = 0
    all_started = asyncio.Event()

    async def one() -> None:
        nonlocal started
        async for response in client.start(sh("sleep 10")):
            event = response.event.event if response.event is not None else None
            if event is not None and event.field == "start":
                started += 1
                if started == count:
                    all_started.set()

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    await all_started.wait()
    peak = daemon.rss_bytes()
    await asyncio.gather(*tasks)
    return peak


async def cycles(client: ProcessClient, count: int) -> None:
    async def run_to_end() -> None:
        async for _ in client.start(sh("true")):
            pass

    for _ in range(count // BATCH):
        await asyncio.gather(*(run_to_end() for _ in range(BATCH)))


async def aborted(client: ProcessClient, count: int) -> None:
    async def abort_after_first_data() -> None:
        stream = client.start(sh("seq 1 30000"))
        async for response in stream:
            event = response.event.event if response.event is not None else None
            if event is not None and event.field == "data":
                break
        await stream.aclose()  # type: ignore[attr-defined]

    for _ in range(count // BATCH):
        await asyncio.gather(*(abort_after_first_data() for _ in range(BATCH)))
    await asyncio.sleep(1)  # the aborted children finish on their own


async def measure(daemon: EnvdProcess) -> None:
    await asyncio.sleep(1)
    idle = daemon.rss_bytes()
    async with ProcessClient(
        daemon.url, codec=proto_binary_codec(), send_compression=None
    ) as client:
        peak = await concurrent_peak(client, daemon, 1000)
        await cycles(client, 1000)  # warm-up
        await aborted(client, 1000)
        warm = daemon.rss_bytes()
        await cycles(client, 1000)
        await aborted(client, 1000)
        after = daemon.rss_bytes()
    print(f"{'B8 envd RSS':44} {'MiB':>8}")
    print(f"{'(a) idle after start':44} {idle / MIB:8.1f}")
    print(f"{'(b) 1000 concurrent streams, growth':44} {(peak - idle) / MIB:8.1f}")
    print(f"{'(d) 1000 cycles + 1000 aborted, after warm-up':44} {(after - warm) / MIB:8.1f}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        daemon = start_envd(Path(tmp))
        try:
            asyncio.run(measure(daemon))
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
