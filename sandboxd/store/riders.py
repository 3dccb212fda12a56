"""Writes that ride with the transaction recording a new sandbox: a gateway's create under an
Idempotency-Key (sandboxd.api.shared_creates) writes its key's sandbox id in the transaction
in which the gateway records the sandbox in the catalog (sandboxd.cluster.nodes: a node older
than node-written rows leaves that to it), one round trip to the database fewer; otherwise the
key's settlement is a transaction of its own. Scoped to the context of the task that runs the
create."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    Rider = Callable[[str], Callable[[], None]]  # the new sandbox's id → the write

_RIDING: ContextVar[list[Rider] | None] = ContextVar("riding", default=None)


@contextlib.contextmanager
def riding(rider: Rider) -> Iterator[list[Rider]]:
    """`rider` joins the first recording in this context (`riders_for`); the list yielded is
    empty once it has."""
    waiting = [rider]
    token = _RIDING.set(waiting)
    try:
        yield waiting
    finally:
        _RIDING.reset(token)


def riders_for(sandbox_id: str) -> tuple[Callable[[], None], ...]:
    """The writes riding with the recording of `sandbox_id`, handed over once."""
    waiting = _RIDING.get()
    if not waiting:
        return ()
    taken = tuple(rider(sandbox_id) for rider in waiting)
    waiting.clear()
    return taken
