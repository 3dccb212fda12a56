"""B8 (connections): envd's RSS before, during and after a burst of many short-lived
connections, each open at the same time as a few hundred others, sending one request (or none:
idle ones), then closed. What the connections held should go back once they are gone (see
envd/memory.py): at --concurrent 10000, 47 MiB idle, about 150 MiB at the peak, 80 MiB after.

Run: .venv/bin/python -m bench.connection_memory [--connections 20000] [--concurrent 400]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from tests.envd_process import EnvdProcess, start_envd

MIB = 1024 * 1024
REQUEST = b"GET /health HTTP/1.1\r\nHost: envd\r\n\r\n"
SETTLE_S = 3.0


async def hold_batch(port: int, count: int, *, with_request: bool) -> None:
    """Open `count` connections at once (each sends a request and reads the answer if
    `with_request`), then close them all."""

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if with_request:
            writer.write(REQUEST)
            await reader.readuntil(b"\r\n\r\n")  # /health: 204, headers only
        return writer

    writers = await asyncio.gather(*(one() for _ in range(count)))
    for writer in writers:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)


async def burst(daemon: EnvdProcess, total: int, concurrent: int, *, with_request: bool) -> int:
    """Runs the burst; returns the highest RSS seen between batches."""
    peak = 0
    for done in range(0, total, concurrent):
        count = min(concurrent, total - done)
        await hold_batch(daemon.port, count, with_request=with_request)
        peak = max(peak, daemon.rss_bytes())
    return peak


def smaps_rollup(pid: int) -> dict[str, int]:
    """A few lines of /proc/PID/smaps_rollup, in bytes."""
    wanted = {"Rss", "Anonymous", "Private_Dirty", "Shared_Clean"}
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in wanted:
                fields[name] = int(rest.split()[0]) * 1024
    return fields


async def settled_rss(daemon: EnvdProcess) -> int:
    await asyncio.sleep(SETTLE_S)
    return daemon.rss_bytes()


async def measure(daemon: EnvdProcess, total: int, concurrent: int) -> None:
    idle = await settled_rss(daemon)
    rows = [("idle after start", idle)]
    for label, with_request in (("with one request each", True), ("idle connections", False)):
        started = time.monotonic()
        peak = await burst(daemon, total, concurrent, with_request=with_request)
        took = time.monotonic() - started
        rows.append((f"{total} {label}: peak ({took:.0f} s)", peak))
        rows.append((f"{total} {label}: {SETTLE_S:.0f} s after closing", await settled_rss(daemon)))
    print(f"{'B8 envd RSS, connection bursts':56} {'MiB':>8}")
    for label, rss in rows:
        print(f"{label:56} {rss / MIB:8.1f}")
    for name, value in smaps_rollup(daemon.pid).items():
        print(f"{'  smaps_rollup ' + name:56} {value / MIB:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--concurrent", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-connections-") as tmp:
        daemon = start_envd(Path(tmp))
        try:
            asyncio.run(measure(daemon, args.connections, args.concurrent))
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
