"""`NodeRows`: the nodes' rows (sandboxd.store.interface Nodes) as a gateway's placement reads
them, kept in memory and read again in the background every REFRESH_S, so that a create makes
no round trip to the database for them. A row is then at most about a heartbeat old
(sandboxd.node.heartbeat DEFAULT_INTERVAL_S), which its status is anyway: a node fuller than
its row says refuses, and the create is tried on another; a node drained meanwhile refuses too
once its own heartbeat has read the flag. Rows older than MAX_AGE_S (the refreshes fail: the
database is away) are read again on the create's path, which fails with StoreUnavailable as a
create did before.

What a row cannot count yet, this gateway's own creates since it was written (`made`), is added
to the node's reserved vCPUs (`unseen`) until a heartbeat written after them is read, so that
back-to-back creates spread as they would over fresh rows."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Final

from sandboxd.errors import SandboxError
from sandboxd.ids import now_us
from sandboxd.node.heartbeat import DEFAULT_INTERVAL_S

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandboxd.store.interface import Store
    from sandboxd.store.rows import NodeRow

log = logging.getLogger("sandboxd.cluster.node_rows")

REFRESH_S: Final = DEFAULT_INTERVAL_S / 2
MAX_AGE_S: Final = DEFAULT_INTERVAL_S


class NodeRows:
    def __init__(self, store: Store, refresh_s: float = REFRESH_S,
                 max_age_s: float = MAX_AGE_S) -> None:  # fmt: skip
        self.store = store
        self.refresh_s = refresh_s
        self.max_age_s = max_age_s
        self._rows: list[NodeRow] = []
        self._read_at = -float("inf")  # time.monotonic() of the last read
        self._made: dict[str, list[tuple[int, int]]] = {}  # node_id → [(µs made at, vCPUs)]

    def current(self) -> list[NodeRow]:
        """Every registered node's row, at most `max_age_s` old.

        Raises:
            StoreUnavailable: they are older and cannot be read again.
        """
        if time.monotonic() - self._read_at > self.max_age_s:
            self.refresh()
        return self._rows

    def refresh(self) -> None:
        """Raises StoreUnavailable."""
        self._rows = self.store.nodes()
        self._read_at = time.monotonic()
        self._made = {node_id: unseen for node_id, made in self._made.items()
                      if (unseen := self._unseen_of(node_id, made))}  # fmt: skip

    def made(self, node_id: str, cpus: int) -> None:
        """A sandbox of `cpus` vCPUs was made on the node just now."""
        self._made.setdefault(node_id, []).append((now_us(), cpus))

    def unseen(self, under_way: Mapping[str, int]) -> Counter[str]:
        """vCPUs by node that its row does not count: `under_way` (creates not answered yet)
        and those made since the row's heartbeat."""
        found = Counter(under_way)
        for node_id, made in self._made.items():
            found[node_id] += sum(cpus for _, cpus in self._unseen_of(node_id, made))
        return found

    def _unseen_of(self, node_id: str, made: list[tuple[int, int]]) -> list[tuple[int, int]]:
        beat = next((n.heartbeat_us for n in self._rows if n.node_id == node_id), 0)
        return [(at, cpus) for at, cpus in made if at >= beat]

    async def run(self) -> None:
        """Refresh every `refresh_s` until cancelled; a read that fails is logged and left to
        the next."""
        while True:
            try:
                self.refresh()
            except SandboxError as exc:
                log.info("the nodes' rows were not read again: %s", exc)
            await asyncio.sleep(self.refresh_s)
