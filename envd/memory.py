"""glibc malloc tuning: keeping stream buffers on the heap, and giving memory back after a
burst of connections.

Large event buffers: glibc serves allocations of a streamed event's size with mmap by default,
and it returns a heap top larger than its trim threshold to the kernel: either way every
event's buffers were fresh pages, faulted in one by one, which was more than half of the CPU
per streamed MiB (measured: 200-800 minor faults per MiB, none with these settings). About six
event-sized buffers are alive at once (more for JSON); the heap keeps room for them between
events, and returns anything beyond sixteen.

Bursts of connections: every open connection costs envd some 5-10 KiB of C heap and Python objects (transport,
parser, request state). When thousands close, glibc keeps the freed chunks: they lie between
chunks still in use, so its automatic trim, which only returns free space at the top of the
heap, finds almost nothing (bench.connection_memory: 47 MiB idle, 120 MiB after bursts of
10,000 concurrent connections had come and gone, and it stayed there). malloc_trim(0) also
returns the free pages inside the heap and every thread's arena: 80 MiB. What stays is mostly
CPython's small-object arenas, which it frees only when a whole arena is empty; it is a
high-water mark (further bursts of the same size add nothing), not a leak.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, cast

from envd.libc import libc

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("envd.memory")

# Connections closed since the last peak that make a trim worth its few milliseconds.
TRIM_AFTER_CLOSED: Final = 500
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3


# None outside glibc: then there is nothing to tune or trim.
_malloc_trim: Final = cast("Callable[[int], int] | None", getattr(libc, "malloc_trim", None))
_mallopt: Final = cast("Callable[[int, int], int] | None", getattr(libc, "mallopt", None))


def keep_buffers_on_heap(buffer_bytes: int) -> None:
    """Process-wide: serve allocations of `buffer_bytes` from the heap, and keep 16 of them
    free there between uses (see the module doc)."""
    if _mallopt is not None:
        _mallopt(_M_MMAP_THRESHOLD, 4 * buffer_bytes)
        _mallopt(_M_TRIM_THRESHOLD, 16 * buffer_bytes)


def release_free_heap() -> None:
    """Return every free page of the C heap to the kernel. Blocking: scans the whole heap,
    holding each arena's lock, so run it in a worker thread."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class BurstWatch:
    """Sees the number of open connections once a tick, and the most open at once since the
    last tick; says when enough have closed since the highest count seen that the heap is
    worth trimming."""

    def __init__(self) -> None:
        self._peak = 0

    def burst_ended(self, peak_since_last: int, open_now: int) -> bool:
        self._peak = max(self._peak, peak_since_last, open_now)
        if self._peak - open_now < TRIM_AFTER_CLOSED:
            return False
        log.debug("%d connections closed since the peak: trimming the heap", self._peak - open_now)
        self._peak = open_now
        return True
