"""A tiny tmpfs for root-only tests that need a full disk or no free inodes (real ENOSPC)."""

from __future__ import annotations

import contextlib
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, *, size: str = "1m", inodes: int = 16) -> Iterator[Path]:
    """Mount a tmpfs of `size` with `inodes` inodes at `mount_point` (created, world-writable)."""
    mount_point.mkdir()
    options = f"size={size},nr_inodes={inodes}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)], check=True)
    try:
        mount_point.chmod(0o777)
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)
