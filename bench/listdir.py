"""ListDir of 10,000 entries: time over the wire vs the bare scandir+lstat floor measured in
this run, /health latency while listings run (the walk must not block the loop), and where
the time goes: each stage of a listing timed in this process.

Run: .venv/bin/python -m bench.listdir [--entries 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import functools
import logging
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
from connectrpc.compression.gzip import GzipCompression

from envd._gen.filesystem.filesystem_connect import FilesystemClientSync
from envd._gen.filesystem.filesystem_pb import ListDirRequest, ListDirResponse
from envd.filesystem import entries
from tests.envd_process import start_envd

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("bench.listdir")


def _populate(directory: Path, count: int) -> None:
    for i in range(count):
        os.close(os.open(directory / f"file-{i:05}", os.O_CREAT | os.O_WRONLY, 0o644))


def _floor_ms(directory: Path) -> float:
    started = time.perf_counter()
    with os.scandir(directory) as it:
        for entry in sorted(it, key=lambda e: e.name):
            entry.stat(follow_symlinks=False)
    return (time.perf_counter() - started) * 1000


def _median_ms(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _stages(directory: Path, runs: int) -> None:
    """Each stage of a listing, in this process: the syscalls, building the entries, the
    codecs, and the gzip connectrpc applies when the client accepts it (its clients do)."""

    def with_xattrs() -> None:
        with os.scandir(directory) as it:
            for entry in sorted(it, key=lambda e: e.name):
                entry.stat(follow_symlinks=False)
                os.listxattr(entry.path)

    response = ListDirResponse(entries=entries.list_dir(str(directory), 1))
    log.info("")
    log.info("| stage (in-process) | ms (median) |")
    log.info("|---|---|")
    log.info(
        "| scandir + lstat (the floor) | %.1f |", _median_ms(lambda: _floor_ms(directory), runs)
    )
    log.info("| scandir + lstat + listxattr | %.1f |", _median_ms(with_xattrs, runs))
    built = _median_ms(lambda: entries.list_dir(str(directory), 1), runs)
    log.info("| entries.list_dir (syscalls + EntryInfo messages) | %.1f |", built)
    gzip = GzipCompression()
    for codec in (proto_binary_codec(), proto_json_codec()):
        encoded = codec.encode(response)
        encode_ms = _median_ms(functools.partial(codec.encode, response), runs)
        gzip_ms = _median_ms(functools.partial(gzip.compress, encoded), runs)
        log.info("| encode %s | %.1f |", codec.name(), encode_ms)
        log.info("| gzip %s (%d KiB) | %.1f |", codec.name(), len(encoded) // 1024, gzip_ms)


def _health_latencies_ms(url: str, stop: threading.Event) -> list[float]:
    samples: list[float] = []
    with httpx.Client(base_url=url) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/health").raise_for_status()
            samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.002)
    return samples


def _health_during(url: str, work: threading.Thread) -> list[float]:
    stop = threading.Event()
    result: list[float] = []
    prober = threading.Thread(target=lambda: result.extend(_health_latencies_ms(url, stop)))
    prober.start()
    work.start()
    work.join()
    stop.set()
    prober.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per /health probe
    scratch = Path(tempfile.mkdtemp(prefix="bench-listdir-"))
    envd = start_envd(scratch)
    try:
        directory = scratch / "big"
        directory.mkdir()
        _populate(directory, args.entries)
        floor = statistics.median(_floor_ms(directory) for _ in range(args.runs))
        log.info("| codec | ListDir ms (median) | floor scandir+lstat ms | ratio |")
        log.info("|---|---|---|---|")
        for name, codec in (("proto", proto_binary_codec()), ("json", proto_json_codec())):
            with FilesystemClientSync(envd.url, codec=codec, send_compression=None) as client:
                times = []
                for _ in range(args.runs):
                    started = time.perf_counter()
                    found = client.list_dir(ListDirRequest(path=str(directory))).entries
                    times.append((time.perf_counter() - started) * 1000)
                    assert len(found) == args.entries
            median = statistics.median(times)
            log.info("| %s | %.0f | %.1f | %.0fx |", name, median, floor, median / floor)

        idle = _health_during(envd.url, threading.Thread(target=time.sleep, args=(1.0,)))

        def list_repeatedly() -> None:
            with FilesystemClientSync(envd.url, codec=proto_binary_codec()) as client:
                for _ in range(args.runs):
                    client.list_dir(ListDirRequest(path=str(directory)))

        busy = _health_during(envd.url, threading.Thread(target=list_repeatedly))
        log.info("")
        log.info("| /health | p50 ms | p99 ms | max ms | samples |")
        log.info("|---|---|---|---|---|")
        for label, samples in (("idle", idle), ("during ListDir", busy)):
            log.info(
                "| %s | %.2f | %.1f | %.1f | %d |",
                label,
                statistics.median(samples),
                statistics.quantiles(samples, n=100, method="inclusive")[98],
                max(samples),
                len(samples),
            )
        _stages(directory, args.runs)
    finally:
        envd.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
