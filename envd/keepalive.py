"""The `Keepalive-Ping-Interval` request header shared by every streaming RPC (Start, Connect,
WatchDir): how long a stream may stay silent before a keepalive message is sent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

KEEPALIVE_INTERVAL_S: Final = 90.0  # Go's default when the header is absent; the SDKs send 50


def keepalive_interval(headers: Mapping[str, str]) -> float:
    """`Keepalive-Ping-Interval` in seconds; missing, unparsable or <= 0 (which crashes Go,
    where its ticker panics) means the default."""
    try:
        seconds = int(headers.get("keepalive-ping-interval", ""))
    except ValueError:
        return KEEPALIVE_INTERVAL_S
    return float(seconds) if seconds > 0 else KEEPALIVE_INTERVAL_S
