"""ListDir of 10,000 entries: time over the wire vs the bare scandir+lstat floor measured in
this run, /health latency while listings run (the walk must not block the loop), and where
the time goes: each stage of a listing timed in this process.

Each round times the floor, then one ListDir per codec with connectrpc's client (which gzips
and decodes every entry into a message, as the SDKs do) and with a raw HTTP client that only
reads and gunzips the body (the daemon's own part), interleaved so that load swings hit every
row alike; ratios are the median of the per-round ratios. The daemon's CPU time per listing
(utime + stime) against the floor's CPU time is the load-insensitive figure. The /health probe
runs while another process lists, so that the client's decoding cannot stall the probe.
envd listens on a free loopback port.

Run: .venv/bin/python -m bench.listdir [--entries 10000] [--rounds 7] [--spread-mtimes]
"""

from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from connectrpc.codec import proto_binary_codec, proto_json_codec

from envd._gen.filesystem.filesystem_connect import FilesystemClientSync
from envd._gen.filesystem.filesystem_pb import ListDirRequest, ListDirResponse
from envd.filesystem import listing, listing_codecs
from tests.envd_process import start_envd

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("bench.listdir")

_LIST_DIR = "/filesystem.Filesystem/ListDir"


def _populate(directory: Path, count: int, spread: bool) -> None:
    """Files made in one go share modification times (about 1,000 distinct among 10,000 here);
    with `spread`, each gets its own second and nanoseconds, the encoder's worst case."""
    for i in range(count):
        path = directory / f"file-{i:05}"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        if spread:
            mtime_ns = 1_700_000_000_000_000_000 + i * 1_000_003_117
            os.utime(path, ns=(mtime_ns, mtime_ns))


def _floor(directory: Path) -> None:
    with os.scandir(directory) as it:
        for entry in sorted(it, key=lambda e: e.name):
            entry.stat(follow_symlinks=False)


def _timed_ms(work: Callable[[], object]) -> tuple[float, float]:
    """(wall ms, this process's CPU ms) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _median_ms(work: Callable[[], object], runs: int) -> float:
    return statistics.median(_timed_ms(work)[1] for _ in range(runs))


def _stages(directory: Path, runs: int) -> None:
    """Each stage of a listing, in this process, as CPU ms: the syscalls, the whole encoded
    listing per codec without and with the gzip its clients accept, and the connectrpc
    client's decoding of it."""

    def with_xattrs() -> None:
        with os.scandir(directory) as it:
            for entry in sorted(it, key=lambda e: e.name):
                entry.stat(follow_symlinks=False)
                os.listxattr(entry.path)

    log.info("")
    log.info("| stage (in-process, CPU) | ms (median) |")
    log.info("|---|---|")
    log.info("| scandir + lstat (the floor) | %.1f |", _median_ms(lambda: _floor(directory), runs))
    log.info("| scandir + lstat + listxattr | %.1f |", _median_ms(with_xattrs, runs))
    stocks = {listing_codecs.PROTO: proto_binary_codec(), listing_codecs.JSON: proto_json_codec()}
    for codec, stock in stocks.items():
        body = bytes(listing.encode_listing(str(directory), 1, codec, gzip=False))
        decode = functools.partial(stock.decode, body, ListDirResponse)
        log.info("| the client: decode %s into messages | %.1f |", codec, _median_ms(decode, runs))
        for gzip in (False, True):
            encode = functools.partial(listing.encode_listing, str(directory), 1, codec, gzip)
            encoded = encode()
            size = len(encoded.gzipped or encoded) // 1024
            log.info(
                "| encode_listing %s%s (%d KiB) | %.1f |",
                codec,
                " + gzip" if gzip else "",
                size,
                _median_ms(encode, runs),
            )


def _raw_list(client: httpx.Client, codec: str, body: bytes) -> None:
    response = client.post(
        _LIST_DIR,
        content=body,
        headers={"content-type": f"application/{codec}", "accept-encoding": "gzip"},
    )
    response.raise_for_status()
    response.read()


def _wire_rounds(url: str, pid: int, directory: Path, entries: int, rounds: int) -> None:
    request = ListDirRequest(path=str(directory))
    raw = httpx.Client(base_url=url)
    sdk = []
    works: list[tuple[str, Callable[[], object]]] = []
    for name, codec in (("proto", proto_binary_codec()), ("json", proto_json_codec())):
        client = FilesystemClientSync(url, codec=codec, send_compression=None)
        sdk.append(client)

        def listed(client: FilesystemClientSync = client) -> None:
            assert len(client.list_dir(request).entries) == entries

        works.append((f"{name}, connectrpc client", listed))
        body = codec.encode(request)
        works.append((f"{name}, raw client", functools.partial(_raw_list, raw, name, body)))
    rows: dict[str, list[tuple[float, float, float]]] = {}  # row → (wall, ratio, server CPU)
    floors = []
    try:
        for _ in range(rounds + 1):  # the first round warms up and is dropped
            floor_wall, floor_cpu = _timed_ms(lambda: _floor(directory))
            floors.append((floor_wall, floor_cpu))
            for row, work in works:
                cpu = _cpu_ms(pid)
                wall = _timed_ms(work)[0]
                server = _cpu_ms(pid) - cpu
                rows.setdefault(row, []).append((wall, wall / floor_wall, server))
    finally:
        raw.close()
        for client in sdk:
            client.close()
    floor_wall = statistics.median(w for w, _ in floors[1:])
    floor_cpu = sum(c for _, c in floors[1:]) / rounds
    log.info(
        "| ListDir of %d files | wall ms (median) | ratio to the floor (median per round) "
        "| envd CPU ms (mean) | envd CPU / floor CPU |",
        entries,
    )
    log.info("|---|---|---|---|---|")
    log.info(
        "| floor: scandir + lstat in-process | %.1f | 1 | - | floor CPU %.1f ms |",
        floor_wall,
        floor_cpu,
    )
    for row, samples in rows.items():
        kept = samples[1:]
        # /proc counts CPU in 10 ms ticks: the mean over every round, not one listing's.
        server = sum(s for _, _, s in kept) / rounds
        log.info(
            "| %s | %.0f | %.2f | %.1f | %.2f |",
            row,
            statistics.median(w for w, _, _ in kept),
            statistics.median(r for _, r, _ in kept),
            server,
            server / floor_cpu,
        )


def _health_latencies_ms(url: str, stop: threading.Event) -> list[float]:
    samples: list[float] = []
    with httpx.Client(base_url=url) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/health").raise_for_status()
            samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.002)
    return samples


def _list_repeatedly(url: str, directory: str, runs: int) -> None:
    with FilesystemClientSync(url, codec=proto_binary_codec()) as client:
        for _ in range(runs):
            client.list_dir(ListDirRequest(path=directory))


def _health_during(url: str, work: Callable[[], None]) -> list[float]:
    stop = threading.Event()
    result: list[float] = []
    prober = threading.Thread(target=lambda: result.extend(_health_latencies_ms(url, stop)))
    prober.start()
    try:
        work()
    finally:
        stop.set()
        prober.join()
    return result


def _health(url: str, directory: Path, runs: int) -> None:
    def in_another_process() -> None:
        lister = multiprocessing.get_context("spawn").Process(
            target=_list_repeatedly, args=(url, str(directory), runs)
        )
        lister.start()
        lister.join()
        if lister.exitcode != 0:
            raise RuntimeError(f"the listing process failed: exit code {lister.exitcode}")

    idle = _health_during(url, functools.partial(time.sleep, 1.0))
    busy = _health_during(url, in_another_process)
    log.info("")
    log.info("| /health | p50 ms | p99 ms | max ms | samples |")
    log.info("|---|---|---|---|---|")
    for label, samples in (("idle", idle), (f"during {runs} ListDirs", busy)):
        log.info(
            "| %s | %.2f | %.1f | %.1f | %d |",
            label,
            statistics.median(samples),
            statistics.quantiles(samples, n=100, method="inclusive")[98],
            max(samples),
            len(samples),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--spread-mtimes", action="store_true", help="a distinct mtime per file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request
    scratch = Path(tempfile.mkdtemp(prefix="bench-listdir-"))
    envd = start_envd(scratch)
    try:
        directory = scratch / "big"
        directory.mkdir()
        _populate(directory, args.entries, args.spread_mtimes)
        log.info("load before: %.1f %.1f %.1f", *os.getloadavg())
        _wire_rounds(envd.url, envd.pid, directory, args.entries, args.rounds)
        _health(envd.url, directory, args.rounds * 3)
        _stages(directory, args.rounds)
        log.info("load after: %.1f %.1f %.1f", *os.getloadavg())
    finally:
        envd.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
