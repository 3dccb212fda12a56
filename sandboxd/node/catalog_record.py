"""A create's row in the cluster's catalog (sandboxd.store.rows CatalogRow) and its spawn's
count (both taken back if the start fails), written by the node that makes the sandbox while
its guest starts (sandboxd.lifecycle.guest_start), when the gateway asks for it
(SandboxConfig.catalog). Written by the gateway once the node had answered, that transaction
was on every create's path (1.5-1.9 ms, bench/README.md); here envd's /init hides it. The row
also exists before any client can learn the sandbox's id: a gateway that dies mid-create
leaves a listed sandbox, not an orphan to reap.

Until the create ends, the node's `get` shows the sandbox as recorded (`creating`): the
reconciliation drops a row whose node does not have its sandbox, and asks the node again before
it does (sandboxd.cluster.reconcile)."""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.ids import now_us
from sandboxd.node.models import recorded
from sandboxd.store.rows import CatalogRow

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.node.models import SandboxInfo
    from sandboxd.store.node_store import NodeStore


class NodeCatalog:
    """The catalog rows this node (`node_id`) writes; `info(sandbox)` is its SandboxInfo."""

    def __init__(self, store: NodeStore, node_id: str,
                 info: Callable[[Sandbox], SandboxInfo]) -> None:  # fmt: skip
        self._store = store
        self.node_id = node_id
        self._info = info
        self._creating: dict[str, SandboxInfo] = {}

    def creating(self, sandbox_id: str) -> SandboxInfo | None:
        """The sandbox as recorded, while its create is still under way."""
        return self._creating.get(sandbox_id)

    @contextlib.contextmanager
    def recording(self) -> Iterator[CatalogRecord]:
        """A create's record (sandboxd.lifecycle.guest_start CreateRecord), for its duration."""
        record = CatalogRecord(self)
        try:
            yield record
        finally:
            self._creating.pop(record.sandbox_id, None)

    async def write(self, sandbox: Sandbox) -> None:
        """Raises SandboxError: the row was not written (StoreUnavailable: the shared
        database has not been reached, or does not answer)."""
        info = self._info(sandbox)
        self._creating[sandbox.id] = info
        shared = self._store.shared_now()
        entry = CatalogRow(sandbox.id, self.node_id, info.team_id, now_us(), recorded(info))
        await _written(f"recording sandbox {sandbox.id} in the catalog", shared.write(
            functools.partial(shared.add_catalog_entry, entry),
            functools.partial(shared.count_spawn, info.template_id, info.started_at),
        ))  # fmt: skip

    async def remove(self, sandbox: Sandbox) -> None:
        """Raises SandboxError: the row could not be deleted, nor the count taken back."""
        shared = self._store.shared_now()
        await _written(f"removing sandbox {sandbox.id} from the catalog", shared.write(
            functools.partial(shared.delete_catalog_entry, sandbox.id),
            functools.partial(shared.uncount_spawn, sandbox.row.template_id),
        ))  # fmt: skip


class CatalogRecord:
    """Implements `sandboxd.lifecycle.guest_start.CreateRecord` for one create."""

    def __init__(self, catalog: NodeCatalog) -> None:
        self._catalog = catalog
        self.sandbox_id = ""

    async def write(self, sandbox: Sandbox) -> None:
        self.sandbox_id = sandbox.id
        await self._catalog.write(sandbox)

    async def remove(self, sandbox: Sandbox) -> None:
        await self._catalog.remove(sandbox)


async def _written(what: str, write: Awaitable[None]) -> None:
    """Await the store's `write`; its backend's own errors (an integrity error, say) as
    SandboxError, so that the node's API answers them as a refusal the gateway understands."""
    try:
        await write
    except SandboxError:
        raise
    except Exception as exc:
        raise SandboxError(f"{what}: {exc}") from exc
