"""Host uid/gid ranges for sandboxes' user namespaces: 65536 ids per sandbox, unique among the
live sandboxes of every sandboxd on the host, in systemd's range for containers
(0x00080000-0x6FFFFFFF, systemd.io/UIDS-GIDS).

A claim is a file `BASE` in CLAIMS_DIR naming the record of the sandbox that holds the range. The
record is the truth: a claim whose record is gone, or names another range, is stale (a sandboxd
killed between its claim and its record, or a teardown that never finished) and is taken over.
CLAIMS_DIR is on /run, so a reboot, which ends every sandbox, frees every range.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sandboxd.errors import HostError

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

CLAIMS_DIR = Path("/run/sandboxd/uid-ranges")
RANGE_SIZE = 65536
FIRST_BASE = 0x00080000
LAST_BASE = 0x6FFF0000


def _owner(claim: Path) -> Path | None:
    try:
        return Path(claim.read_text())
    except (FileNotFoundError, ValueError):
        return None


def claim(record: Path, holds: Callable[[Path, int], bool], commit: Callable[[int], T]) -> T:
    """Claim the lowest free range for the sandbox whose record is `record`, and have
    `commit(base)` write that record, with the lock held: until the record exists, another
    claim would take the range over as stale. Returns what `commit` returned. `holds(record,
    base)` tells whether a record still holds range `base`.

    Raises:
        HostError: every range is taken.
        Whatever `commit` raised (the range is not claimed).
    """
    CLAIMS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(CLAIMS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken = {int(name) for name in os.listdir(CLAIMS_DIR) if name.isdigit()}
        for base in range(FIRST_BASE, LAST_BASE + 1, RANGE_SIZE):
            path = CLAIMS_DIR / str(base)
            if base in taken:
                owner = _owner(path)
                if owner is not None and holds(owner, base):
                    continue
            tmp = CLAIMS_DIR / f".{base}.new"
            tmp.write_text(str(record))
            tmp.rename(path)
            try:
                return commit(base)
            except BaseException:
                path.unlink()
                raise
    raise HostError("no free uid range left for another sandbox")


def release(record: Path, base: int) -> None:
    """Free range `base` if `record` holds its claim (nothing to do otherwise)."""
    path = CLAIMS_DIR / str(base)
    with contextlib.suppress(FileNotFoundError), open(CLAIMS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _owner(path) == record:
            path.unlink()


def claimed_by(record: Path) -> list[int]:
    """The ranges whose claims name `record` (for tests and leak checks)."""
    if not CLAIMS_DIR.is_dir():
        return []
    return sorted(
        int(name) for name in os.listdir(CLAIMS_DIR)
        if name.isdigit() and _owner(CLAIMS_DIR / name) == record
    )  # fmt: skip
