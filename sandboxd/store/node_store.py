"""A node agent's store (`sandboxd node`): the records every node and gateway of a cluster
must see in the shared database (templates, builds and their logs, tags, snapshot records,
and the teams they belong to), so that what one node builds or snapshots any node boots and
any gateway lists; the rest (its sandboxes, their metrics and events, its volumes) in its own
SQLite store, as serve keeps them, so that a restarted agent adopts its sandboxes whether the
shared database answers or not.

The shared store is opened off the event loop by the first heartbeat that can
(sandboxd.node.heartbeat) or before the loop runs; until then a read or write of its tables
raises StoreUnavailable (a create is a 503, as a gateway's calls are while the database is
away). A `write` holding changes of both goes as two transactions, the shared one first: each
of its changes is a method of one of the two stores (`functools.partial(store.put_x, ...)`
over this store gives the owning store's method), routed by it."""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, cast

from sandboxd.errors import StoreUnavailable
from sandboxd.store.interface import Builds, Teams, Templates

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.store.interface import Store

SHARED_METHODS = frozenset(
    name for group in (Templates, Builds, Teams) for name in vars(group) if not name.startswith("_")
)


class NodeStore:
    """`local`: the agent's SQLite store; `open_shared()` opens the shared one (blocking),
    after which `opened(shared)` runs once (the base template recorded there)."""

    def __init__(self, local: Store, open_shared: Callable[[], Store],
                 opened: Callable[[Store], None]) -> None:  # fmt: skip
        self._local = local
        self._open_shared = open_shared
        self._opened = opened
        self._shared: Store | None = None
        self._opening = threading.Lock()

    def as_store(self) -> Store:
        """This store as the interface (its tables are the two stores' methods)."""
        return cast("Store", self)

    def shared(self) -> Store:
        """The shared store, opened now if it is not yet. Blocking: off the event loop.

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        with self._opening:
            if self._shared is None:
                shared = self._open_shared()
                self._opened(shared)
                self._shared = shared
            return self._shared

    def shared_now(self) -> Store:
        """The shared store if it is open. Raises StoreUnavailable: it is not yet."""
        if self._shared is None:
            raise StoreUnavailable("the shared database has not been reached yet")
        return self._shared

    def count_spawn(self, template_id: str, at_us: int) -> None:
        """Counts nothing: a node's creates come from gateways, and each is counted in the
        transaction recording it in the catalog, the node's (sandboxd.node.catalog_record) or
        an older gateway's (sandboxd.cluster.nodes), so that a create waits for one write to
        the shared database, not two."""

    def __getattr__(self, name: str) -> Any:
        if name not in SHARED_METHODS:
            return getattr(self._local, name)
        return getattr(self.shared_now(), name)

    async def write(self, *changes: Callable[[], None]) -> None:
        """Store.write over the two stores: the shared one's changes in one transaction, then
        the local one's in another. Raises what either store's `write` raises."""
        shared = [c for c in changes if self._shared is not None and _owner(c) is self._shared]
        local = [c for c in changes if c not in shared]
        if shared:
            await cast("Store", self._shared).write(*shared)
        if local:
            await self._local.write(*local)

    def close(self) -> None:
        self._local.close()
        if self._shared is not None:
            self._shared.close()


def _owner(change: Callable[[], None]) -> object:
    """The store whose method `change` is bound to."""
    func = change.func if isinstance(change, functools.partial) else change
    return getattr(func, "__self__", None)
