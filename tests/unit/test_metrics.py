"""The /metrics memory arithmetic on a fixed /proc/meminfo text."""

from __future__ import annotations

from envd.http.metrics import memory_bytes, parse_meminfo

MEMINFO = """MemTotal:        1000 kB
MemFree:          100 kB
MemAvailable:     600 kB
Buffers:           50 kB
Cached:           300 kB
SwapCached:         0 kB
SReclaimable:      40 kB
HugePages_Total:    0
"""


def test_meminfo_fields_are_bytes() -> None:
    fields = parse_meminfo(MEMINFO)
    assert fields["MemTotal"] == 1000 * 1024
    assert fields["HugePages_Total"] == 0  # unitless counts stay counts


def test_used_and_cache_follow_the_reference_formula() -> None:
    total, used, cache = memory_bytes(parse_meminfo(MEMINFO))
    assert total == 1000 * 1024
    assert cache == (300 + 40) * 1024
    assert used == (1000 - 100 - 50 - 340) * 1024
