"""A node agent's heartbeat: every `interval_s` its row in the cluster's shared database
(sandboxd.store.interface's Nodes) gets where gateways reach it, a fresh lease and its status
(capacity, use, warm sandboxes per template, the templates it holds), and the agent learns
whether an operator drains it. A heartbeat that fails (the database down) is logged and the
next one tried; the lease runs out only if none lands for `lease_s`.

Two drains, told apart: an operator's is the row's `draining` flag, which no heartbeat writes,
so it holds across the agent's restarts until `sandboxd node undrain`; the agent's own, while
it stops, is its status's `stopping`, written by its last heartbeat and replaced by the next
start's first."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sandboxd.errors import StoreUnavailable
from sandboxd.host.uid_ranges import FIRST_BASE, LAST_BASE, RANGE_SIZE
from sandboxd.ids import now_us
from sandboxd.store.rows import NodeRow

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.lifecycle.manager import SandboxManager
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.node.heartbeat")

DEFAULT_INTERVAL_S: Final = 2.0  # `sandboxd node --heartbeat-s`'s default


@dataclass(frozen=True)
class Advertised:
    """How gateways reach a node agent and how long its lease lasts."""

    node_id: str
    api_url: str
    proxy_address: str
    lease_s: int
    max_sandboxes: int


def max_sandboxes(network_slots: int | None) -> int:
    """The most sandboxes a node runs at once: its uid ranges, or its network pool's slots."""
    ranges = (LAST_BASE - FIRST_BASE) // RANGE_SIZE + 1
    return ranges if network_slots is None else min(ranges, network_slots)


class Heartbeat:
    """Writes the node's row to the shared store every `interval_s`, the store opened by
    `open_shared` at the first heartbeat that can (an agent starts whether the database is up or
    not); `draining` is what the last heartbeat read back."""

    def __init__(
        self,
        open_shared: Callable[[], Store],
        manager: SandboxManager,
        node: Advertised,
        interval_s: float,
    ) -> None:
        self._open_shared = open_shared
        self._shared: Store | None = None
        self._manager = manager
        self._node = node
        self._interval_s = interval_s
        self._cpu = _CpuUse()
        self.draining = False  # an operator's drain, as the last heartbeat read it back
        self._stopping = False

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            await self.beat()
            await asyncio.sleep(self._interval_s)

    async def beat(self) -> bool:
        """One heartbeat; False when it failed (logged)."""
        n = self._node
        row = NodeRow(n.node_id, n.api_url, n.proxy_address, now_us(), n.lease_s,
                      status=self.status())  # fmt: skip
        try:
            if self._shared is None:  # a connection and migrations: off the event loop
                self._shared = await asyncio.to_thread(self._open_shared)
            shared = self._shared
            drained: list[bool] = []
            await shared.write(lambda: drained.append(shared.heartbeat_node(row)))
        # StoreUnavailable, or the driver's own error: whatever it is, the next beat tries again.
        except Exception as exc:  # noqa: BLE001
            log.warning("heartbeat of node %s failed (next in %ss): %s",
                        n.node_id, self._interval_s, exc)  # fmt: skip
            return False
        self.draining = drained[0]
        return True

    async def last_beat(self) -> bool:
        """The heartbeat of an agent that stops (after `run` ended): its status says
        `stopping`, so that gateways place nothing here while it is down; False when it failed
        (logged)."""
        self._stopping = True
        return await self.beat()

    def status(self) -> dict[str, Any]:
        """The status JSON of the node's row (the cluster's shape: docs/sandboxd.md)."""
        manager = self._manager
        held = [s for s in manager.all() if s.box is not None]  # running, or paused in memory
        running = [s for s in held if s.running]
        templates, warm = _held_templates(manager)
        total_kb, available_kb = _memory_kb()
        return {
            "cpus": os.cpu_count() or 1,
            "memory_mb": total_kb >> 10,
            "max_sandboxes": self._node.max_sandboxes,
            "sandboxes": len(held),
            "cpu_requested": sum(s.row.cpu_count for s in running),
            "cpu_usage": self._cpu.sample(),
            "memory_used_mb": (total_kb - available_kb) >> 10,
            "warm": warm,
            "templates": templates,
            "stopping": self._stopping,
        }


def _held_templates(manager: SandboxManager) -> tuple[list[str], dict[str, int]]:
    """The templates whose every layer (of their newest build) is on this machine (a create
    of one boots without a pull), and how many warm sandboxes of each wait. None while the
    shared database (the templates' records) is away."""
    try:
        images = manager.templates.newest_images()
    except StoreUnavailable:
        return [], {}
    held, warm = [], {}
    for template, image in images:
        if all(p.is_dir() for p in image.layer_paths):
            held.append(template.template_id)
        waiting = manager.boxes.pool.waiting(image, template.disk_size_mb)
        if waiting:
            warm[template.template_id] = waiting
    return held, warm


class _CpuUse:
    """The host's CPUs in use since the last sample (0..cpus), from /proc/stat."""

    def __init__(self) -> None:
        self._last = _cpu_times()

    def sample(self) -> float:
        busy, total = _cpu_times()
        last_busy, last_total = self._last
        self._last = (busy, total)
        if total <= last_total:
            return 0.0
        return round((busy - last_busy) / (total - last_total) * (os.cpu_count() or 1), 3)


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs: idle and iowait are not busy."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])  # guest time is counted in user time already
    return total - idle, total


def _memory_kb() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in KiB."""
    values = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0])
    return values["MemTotal"], values["MemAvailable"]
