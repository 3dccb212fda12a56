"""B7: POST /files/compose of N parts, end to end over HTTP, against the in-process kernel
floor measured in the same run: FICLONERANGE on an XFS loop image (mkfs.xfs -m reflink=1,
needs root) and copy_file_range on ext4 (/var/tmp). An unaligned set (parts of N MiB + 1 B)
shows why envd falls back to read/write, not copy_file_range, on reflink filesystems.

Sources are hard links to master parts, so every run composes fresh sources without
rewriting the data (compose deletes its sources).
Run: .venv/bin/python -m bench.compose [--part-mib 100] [--parts 10] [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench.transfer import MIB
from tests.envd_process import start_envd

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

FICLONERANGE = 0x4020940D
XFS_IMAGE_BYTES = 6 * 1024 * MIB


@contextlib.contextmanager
def xfs_mount() -> Iterator[Path]:
    """A fresh reflink-enabled XFS loop image, mounted for the block and removed after."""
    fd, image = tempfile.mkstemp(prefix="bench-compose-", suffix=".xfs", dir="/var/tmp")
    os.ftruncate(fd, XFS_IMAGE_BYTES)  # sparse
    os.close(fd)
    mount_point = Path(tempfile.mkdtemp(prefix="bench-compose-xfs-"))
    try:
        subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", image], check=True)
        subprocess.run(["mount", "-o", "loop", image, str(mount_point)], check=True)
        try:
            yield mount_point
        finally:
            subprocess.run(["umount", str(mount_point)], check=True)
    finally:
        os.unlink(image)
        mount_point.rmdir()


def write_masters(directory: Path, count: int, size: int) -> list[Path]:
    block = os.urandom(MIB)
    masters = []
    for index in range(count):
        path = directory / f"master{index}"
        with open(path, "wb") as f:
            f.writelines(block for _ in range(size // MIB))
            f.write(block[: size % MIB])
        masters.append(path)
    os.sync()
    return masters


def link_sources(masters: list[Path], tag: str) -> list[Path]:
    sources = []
    for master in masters:
        source = master.with_name(f"{master.name}.{tag}")
        os.link(master, source)
        sources.append(source)
    return sources


def floor_clone(sources: list[Path], destination: Path) -> None:
    with open(destination, "wb") as out:
        offset = 0
        for source in sources:
            with open(source, "rb") as src:
                fcntl.ioctl(
                    out.fileno(), FICLONERANGE, struct.pack("=qQQQ", src.fileno(), 0, 0, offset)
                )
                offset += os.fstat(src.fileno()).st_size


def floor_copy_file_range(sources: list[Path], destination: Path) -> None:
    with open(destination, "wb") as out:
        for source in sources:
            with open(source, "rb") as src:
                remaining = os.fstat(src.fileno()).st_size
                while remaining:
                    remaining -= os.copy_file_range(src.fileno(), out.fileno(), remaining)


def floor_read_write(sources: list[Path], destination: Path) -> None:
    with open(destination, "wb", buffering=0) as out:
        for source in sources:
            with open(source, "rb", buffering=0) as src:
                while chunk := src.read(MIB):
                    out.write(chunk)


def timed_ms(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def measure(
    client: httpx.Client,
    masters: list[Path],
    floor: Callable[[list[Path], Path], None],
    runs: int,
) -> tuple[list[float], list[float]]:
    """(envd ms, floor ms) per run; each run composes fresh links of the masters."""
    directory = masters[0].parent
    expected = sum(m.stat().st_size for m in masters)
    envd_ms, floor_ms = [], []
    for run in range(runs):
        sources = link_sources(masters, f"e{run}")
        destination = directory / f"envd-result-{run}"
        body = {"source_paths": [str(s) for s in sources], "destination": str(destination)}

        def compose(body: dict[str, Sequence[str]] = body) -> None:
            client.post("/files/compose", json=body, timeout=300).raise_for_status()

        envd_ms.append(timed_ms(compose))
        assert destination.stat().st_size == expected
        destination.unlink()
        sources = link_sources(masters, f"f{run}")
        result = directory / f"floor-result-{run}"
        floor_ms.append(timed_ms(lambda: floor(sources, result)))  # noqa: B023 - called at once
        result.unlink()
        for source in sources:
            source.unlink()
    return envd_ms, floor_ms


FLOORS: dict[str, Callable[[list[Path], Path], None]] = {
    "FICLONERANGE": floor_clone,
    "copy_file_range": floor_copy_file_range,
    "read/write": floor_read_write,
}


def measure_row(
    client: httpx.Client, name: str, masters: list[Path], floor_name: str, runs: int
) -> str:
    envd_ms, floor_ms = measure(client, masters, FLOORS[floor_name], runs)
    e, f = statistics.median(envd_ms), statistics.median(floor_ms)
    return (
        f"| {name} | {e:.1f} [{min(envd_ms):.1f}-{max(envd_ms):.1f}] | {floor_name} "
        f"{f:.1f} [{min(floor_ms):.1f}-{max(floor_ms):.1f}] | {e / f:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part-mib", type=int, default=100)
    parser.add_argument("--parts", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    part = args.part_mib * MIB
    log_dir = Path(tempfile.mkdtemp(prefix="bench-compose-logs-"))
    envd = start_envd(log_dir)
    rows = []
    try:
        with httpx.Client(base_url=envd.url) as client:
            ext4 = Path(tempfile.mkdtemp(prefix="bench-compose-ext4-", dir="/var/tmp"))
            try:
                masters = write_masters(ext4, args.parts, part)
                rows.append(measure_row(client, "ext4", masters, "copy_file_range", args.runs))
            finally:
                shutil.rmtree(ext4)
            if os.geteuid() != 0:
                print("not root: XFS rows skipped")
            else:
                with xfs_mount() as xfs:
                    masters = write_masters(xfs, args.parts, part)
                    rows.append(
                        measure_row(client, "XFS aligned", masters, "FICLONERANGE", args.runs)
                    )
                    unaligned_dir = xfs / "unaligned"
                    unaligned_dir.mkdir()
                    unaligned = write_masters(unaligned_dir, args.parts, part + 1)
                    rows.extend(
                        measure_row(client, "XFS +1 B", unaligned, floor, args.runs)
                        for floor in ("read/write", "copy_file_range")
                    )
    finally:
        envd.stop()
        shutil.rmtree(log_dir, ignore_errors=True)
    print(
        f"\nB7 compose {args.parts} x {args.part_mib} MiB, end to end over HTTP, "
        f"median of {args.runs} (ms)\n| set | envd ms [range] | floor ms [range] | ratio |\n|---|---|---|---|"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
