"""Giving memory back after a burst of connections.

Every open connection costs envd some 5-10 KiB of C heap and Python objects (transport,
parser, request state). When thousands close, glibc keeps the freed chunks: they lie between
chunks still in use, so its automatic trim, which only returns free space at the top of the
heap, finds almost nothing (bench.connection_memory: 47 MiB idle, 120 MiB after bursts of
10,000 concurrent connections had come and gone, and it stayed there). malloc_trim(0) also
returns the free pages inside the heap and every thread's arena: 80 MiB. What stays is mostly
CPython's small-object arenas, which it frees only when a whole arena is empty; it is a
high-water mark (further bursts of the same size add nothing), not a leak.
"""

from __future__ import annotations

import ctypes
import logging
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("envd.memory")

# Connections closed since the last peak that make a trim worth its few milliseconds.
TRIM_AFTER_CLOSED: Final = 500


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast("Callable[[int], int]", ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None


_malloc_trim: Final = _find_malloc_trim()


def release_free_heap() -> None:
    """Return every free page of the C heap to the kernel. Blocking: scans the whole heap,
    holding each arena's lock, so run it in a worker thread."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class BurstWatch:
    """Sees the number of open connections once a tick; says when enough have closed since
    the highest count seen that the heap is worth trimming."""

    def __init__(self) -> None:
        self._peak = 0

    def burst_ended(self, open_now: int) -> bool:
        self._peak = max(self._peak, open_now)
        if self._peak - open_now < TRIM_AFTER_CLOSED:
            return False
        log.debug("%d connections closed since the peak: trimming the heap", self._peak - open_now)
        self._peak = open_now
        return True
