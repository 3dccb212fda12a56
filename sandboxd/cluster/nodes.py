"""`ClusterNodes`: the node service (sandboxd.node.service.NodeService) of a gateway, over the
node agents registered in the shared database. A create is placed (sandboxd.cluster.placement),
tried on another node when one refuses, within CREATE_DEADLINE_S, and recorded in the catalog
once made; every other operation goes to the node the catalog names. A sandbox whose node's
lease expired is listed as lost (sandboxd.cluster.catalog), and operations on it raise NodeLost
(a kill only forgets it: the node, if it returns, has its sandbox reaped), but for the resume
or connect of one paused to disk, which moves it to another node (sandboxd.cluster.moves)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from sandboxd.cluster import catalog, placement, volumes
from sandboxd.cluster.moves import CatalogMoves
from sandboxd.cluster.node_rows import NodeRows
from sandboxd.errors import (
    InitRefused,
    NodeLost,
    NodeUnreachable,
    NoNodeAvailable,
    NotAllowed,
    NotFound,
    SandboxError,
    SandboxNotFound,
    TemplateError,
    TemplateNotFound,
)
from sandboxd.ids import now_us
from sandboxd.node.builds import NodeBuilds
from sandboxd.node.models import recorded
from sandboxd.node.service import NodeAgentService, NodeVolumes
from sandboxd.store.riders import riders_for
from sandboxd.store.rows import CatalogRow
from sandboxd.templates.catalog import BASE_CPUS

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

    from sandboxd.node.content_stream import Answer
    from sandboxd.node.models import LogEntry, SandboxConfig, SandboxInfo, SnapshotInfo
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import MetricSample, NodeRow

log = logging.getLogger("sandboxd.cluster.nodes")

T = TypeVar("T")

CREATE_DEADLINE_S: Final = 60.0
# A node's refusals that another node would repeat: the create's own fault, not the node's.
CALLERS_FAULT = (NotAllowed, NotFound, TemplateError, InitRefused)


class NodeClient(Protocol):
    """A node's service over the wire (sandboxd.node.remote.RemoteNode)."""

    async def close(self) -> None: ...

    async def upload(
        self, template_id: str, files_hash: str, body: AsyncIterator[bytes], length: int
    ) -> None: ...

    async def volume_content(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes] | None,
    ) -> Answer: ...


class Remote(NodeAgentService, NodeBuilds, NodeVolumes, NodeClient, Protocol): ...


class ClusterNodes:
    """`dial(node)` makes the client of a registered node; `on_gone(id)` callbacks run when a
    sandbox stops being reachable where it was (killed, paused, lost), `on_made(id, node)` ones
    when one was recorded on its node. `rows` are the nodes' rows placement reads (their
    refreshes run by whoever runs the gateway: `rows.run()`)."""

    def __init__(self, store: Store, dial: Callable[[NodeRow], Remote],
                 deadline_s: float = CREATE_DEADLINE_S) -> None:  # fmt: skip
        self.store = store
        self.dial = dial
        self.deadline_s = deadline_s
        self.reserved: Counter[str] = Counter()  # vCPUs of creates under way, by node
        self.rows = NodeRows(store)
        self._clients: dict[str, tuple[str, Remote]] = {}  # node_id → (api_url, client)
        self._gone: list[Callable[[str], None]] = []
        self.moves = CatalogMoves(self)
        self._made_callbacks: list[Callable[[str, NodeRow], None]] = []

    def on_gone(self, callback: Callable[[str], None]) -> None:
        self._gone.append(callback)

    def on_made(self, callback: Callable[[str, NodeRow], None]) -> None:
        self._made_callbacks.append(callback)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for _, client in clients.values():
            await client.close()

    def client(self, node: NodeRow) -> Remote:
        """The client of `node` (a new one when its address changed)."""
        known = self._clients.get(node.node_id)
        if known is not None and known[0] == node.api_url:
            return known[1]
        client = self.dial(node)
        self._clients[node.node_id] = (node.api_url, client)
        return client

    # Creates

    async def create(self, config: SandboxConfig) -> SandboxInfo:
        """Raises NoNodeAvailable: no node took it within the deadline; the errors of
        NodeService.create that are the create's own fault; StoreUnavailable."""
        template_id, cpus, shared = self._template(config.template, config.team_id)
        home = volumes.mounts_home(self.store, config)  # its volumes' node, or any
        deadline = asyncio.get_running_loop().time() + self.deadline_s
        asked = dataclasses.replace(config, catalog=True)  # the node records it: see _made
        refusals: dict[str, str] = {}
        unknown: set[str] = set()  # the nodes that do not hold a template only nodes know
        while True:
            rows = [n for n in self.rows.current() if home is None or n.node_id == home.node_id]
            node = placement.choose(rows, template_id, cpus, now_us(), refusals,
                                    self.rows.unseen(self.reserved))  # fmt: skip
            left = deadline - asyncio.get_running_loop().time()
            if node is None or left <= 0:
                if refusals and unknown == set(refusals):
                    raise TemplateNotFound(config.template)
                raise NoNodeAvailable(placement.no_node(refusals, home.node_id if home else None))
            try:
                info = await self._create_on(node, asked, cpus, left)
            except TemplateNotFound as exc:
                if shared:
                    raise
                unknown.add(node.node_id)  # a snapshot of another node's sandbox, say
                refusals[node.node_id] = str(exc)
                continue
            except CALLERS_FAULT:
                raise
            except Exception as exc:  # noqa: BLE001  # refused (full, draining) or unreachable: another node
                log.info("node %s refused a create: %s", node.node_id, exc)
                refusals[node.node_id] = str(exc) or type(exc).__name__
                continue
            await self._made(node, info)
            return info

    def _template(self, name: str, team_id: str) -> tuple[str, int, bool]:
        """The template's id and vCPUs as the shared database has them, and True; a template
        only nodes know (each node's own base, its snapshots) by its name, at the base's vCPUs,
        and False: a node that takes the create resolves it, one that does not hold it refuses
        it as unknown and another is tried."""
        template = self.store.template(name.split(":", 1)[0], team_id)
        if template is None:
            return name, BASE_CPUS, False
        return template.template_id, template.cpu_count, True

    async def _create_on(self, node: NodeRow, config: SandboxConfig, cpus: int,
                         timeout_s: float) -> SandboxInfo:  # fmt: skip
        self.reserved[node.node_id] += cpus
        try:
            info = await asyncio.wait_for(self.client(node).create(config), timeout_s)
            self.rows.made(node.node_id, cpus)
            return info
        finally:
            self.reserved[node.node_id] -= cpus

    async def _made(self, node: NodeRow, info: SandboxInfo) -> None:
        """A create made: the node wrote its catalog row and counted its spawn alongside envd's
        /init (sandboxd.node.catalog_record), off the create's path; a node older than that
        (`cataloged` false) left both to the gateway, as before. An Idempotency-Key's
        settlement then goes in a transaction of its own (sandboxd.api.shared_creates)."""
        if info.cataloged:
            self._announce(info.sandbox_id, node)
        else:
            await self._record(node, info, spawned=True)

    async def _record(self, node: NodeRow, info: SandboxInfo, spawned: bool = False) -> None:
        """One catalog row for the sandbox, and when `spawned` (a create's, not a fork's) its
        template's spawn counted (a node counts none: sandboxd.store.node_store); without the
        row (the database down) the sandbox is killed again, so that nothing runs that no
        gateway knows."""
        entry = CatalogRow(info.sandbox_id, node.node_id, info.team_id, now_us(),
                           recorded(info))  # fmt: skip
        changes = [functools.partial(self.store.add_catalog_entry, entry)]
        if spawned:
            changes.append(functools.partial(self.store.count_spawn, info.template_id,
                                             info.started_at))  # fmt: skip
        try:  # with an Idempotency-Key's settlement, in one transaction
            await self.store.write(*changes, *riders_for(info.sandbox_id))
        except BaseException:
            with contextlib.suppress(Exception):  # else the reaper's: it is an orphan now
                await self.client(node).kill(info.sandbox_id)
            raise
        self._announce(info.sandbox_id, node)

    def _announce(self, sandbox_id: str, node: NodeRow) -> None:
        for callback in self._made_callbacks:
            callback(sandbox_id, node)

    # Routing by the catalog

    def _owner(self, sandbox_id: str) -> tuple[CatalogRow, NodeRow | None]:
        """The sandbox's row and its node while that node's lease runs (None when expired).

        Raises:
            SandboxNotFound: not in the catalog.
        """
        entry = self.store.catalog_entry(sandbox_id)
        if entry is None:
            raise SandboxNotFound(sandbox_id)
        now = now_us()
        node = self.store.node(entry.node_id)
        return entry, node if node is not None and placement.alive(node, now) else None

    def _live_owner(self, sandbox_id: str) -> NodeRow:
        """Raises SandboxNotFound; NodeLost: its node's lease expired."""
        entry, node = self._owner(sandbox_id)
        if node is None:
            raise NodeLost(sandbox_id, entry.node_id)
        return node

    async def _ask(
        self, sandbox_id: str, node: NodeRow, call: Callable[[Remote], Awaitable[T]]
    ) -> T:
        """`call` on the node's client. Raises NodeLost: the node does not answer."""
        try:
            return await call(self.client(node))
        except NodeUnreachable as exc:
            raise NodeLost(sandbox_id, node.node_id, f"which does not answer ({exc})") from exc

    async def _on_node(self, sandbox_id: str, call: Callable[[Remote], Awaitable[T]]) -> T:
        return await self._ask(sandbox_id, self._live_owner(sandbox_id), call)

    def _gone_now(self, sandbox_id: str) -> None:
        for callback in self._gone:
            callback(sandbox_id)

    async def _forget(self, sandbox_id: str) -> None:
        self._gone_now(sandbox_id)
        await self.store.write(functools.partial(self.store.delete_catalog_entry, sandbox_id))

    async def kill(self, sandbox_id: str) -> None:
        _, node = self._owner(sandbox_id)
        if node is not None:
            try:
                await self._ask(sandbox_id, node, lambda n: n.kill(sandbox_id))
            except SandboxNotFound:
                await self._forget(sandbox_id)  # it ended on its node: the row was stale
                raise
        await self._forget(sandbox_id)

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        entry, node = self._owner(sandbox_id)
        if node is None:
            raise NodeLost(sandbox_id, entry.node_id)
        await self._ask(sandbox_id, node, lambda n: n.pause(sandbox_id, memory))
        self._gone_now(sandbox_id)
        try:
            paused = await self.client(node).get(sandbox_id)
        except SandboxError as exc:
            log.warning("sandbox %s: its state after the pause is unknown: %s", sandbox_id, exc)
            return
        if paused is not None:
            await self.noted(entry, node, paused)

    async def resume(self, sandbox_id: str, timeout_s: int) -> SandboxInfo:
        """A sandbox paused to disk on a node whose lease expired is moved (sandboxd.cluster.
        moves); raises as NodeService.resume and CatalogMoves.move."""
        entry, node = await self._resumable(sandbox_id)
        info = await self._ask(sandbox_id, node, lambda n: n.resume(sandbox_id, timeout_s))
        await self.noted(entry, node, info)
        return info

    async def connect(
        self, sandbox_id: str, timeout_s: int, memory: bool = True
    ) -> tuple[SandboxInfo, bool]:
        """As `resume` for a paused sandbox."""
        entry, node = await self._resumable(sandbox_id)
        answer = await self._ask(
            sandbox_id, node, lambda n: n.connect(sandbox_id, timeout_s, memory)
        )
        await self.noted(entry, node, answer[0])
        return answer

    async def _resumable(self, sandbox_id: str) -> tuple[CatalogRow, NodeRow]:
        """The sandbox's row and live node, after its move if its node's lease expired."""
        entry, node = self._owner(sandbox_id)
        if node is not None:
            return entry, node
        node = await self.moves.move(entry)
        self._gone_now(sandbox_id)  # cached routes name its old node
        return self.store.catalog_entry(sandbox_id) or entry, node

    async def noted(self, entry: CatalogRow, node: NodeRow, info: SandboxInfo) -> None:
        """The catalog's view of a sandbox changed on its node (CatalogMoves.note); when it
        cannot be written now, the reconciliation writes it later."""
        try:
            await self.moves.note(entry, node, info)
        except SandboxError as exc:
            log.warning(
                "sandbox %s: the catalog's view of it not updated: %s", entry.sandbox_id, exc
            )

    async def snapshot(self, sandbox_id: str, name: str | None) -> SnapshotInfo:
        return await self._on_node(sandbox_id, lambda n: n.snapshot(sandbox_id, name))

    async def fork(
        self, sandbox_id: str, timeout_s: int, count: int
    ) -> list[SandboxInfo | SandboxError]:
        node = self._live_owner(sandbox_id)
        children = await self._ask(sandbox_id, node, lambda n: n.fork(sandbox_id, timeout_s, count))
        for child in children:
            if not isinstance(child, SandboxError):
                await self._record(node, child)
        return children

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        await self._on_node(sandbox_id, lambda n: n.set_timeout(sandbox_id, timeout_s))

    async def update_network(self, sandbox_id: str, update: dict[str, Any]) -> None:
        await self._on_node(sandbox_id, lambda n: n.update_network(sandbox_id, update))

    async def metrics(
        self, sandbox_id: str, start_s: int | None, end_s: int | None, team_id: str
    ) -> list[MetricSample]:
        return await self._on_node(
            sandbox_id, lambda n: n.metrics(sandbox_id, start_s, end_s, team_id)
        )

    async def logs(self, sandbox_id: str, since_us: int | None, until_us: int | None,
                   limit: int, newest_first: bool) -> list[LogEntry]:  # fmt: skip
        return await self._on_node(
            sandbox_id, lambda n: n.logs(sandbox_id, since_us, until_us, limit, newest_first)
        )

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        try:
            entry, node = self._owner(sandbox_id)
        except SandboxNotFound:
            return None
        if node is None:
            return catalog.lost(entry, catalog.lost_message(entry.node_id, self._row(entry)))
        try:
            return await self.client(node).get(sandbox_id)
        except NodeUnreachable as exc:
            return catalog.lost(entry, catalog.unanswered_message(entry.node_id, exc))

    def _row(self, entry: CatalogRow) -> NodeRow | None:
        return self.store.node(entry.node_id)

    async def list_sandboxes(self) -> list[SandboxInfo]:
        """The catalog's sandboxes as their nodes show them; those of a node whose lease
        expired, or that did not answer, as lost."""
        entries = {e.sandbox_id: e for e in self.store.catalog()}
        nodes = {n.node_id: n for n in self.store.nodes()}
        now = now_us()
        live = [n for n in nodes.values() if placement.alive(n, now)]
        answers = await asyncio.gather(*(self.client(n).list_sandboxes() for n in live),
                                       return_exceptions=True)  # fmt: skip
        found: list[SandboxInfo] = []
        messages = {
            n: catalog.lost_message(n, nodes.get(n)) for n in {e.node_id for e in entries.values()}
        }
        for node, answer in zip(live, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("node %s did not list its sandboxes: %s", node.node_id, answer)
                messages[node.node_id] = catalog.unanswered_message(node.node_id, answer)
                continue
            messages.pop(node.node_id, None)
            found += [s for s in answer if s.sandbox_id in entries]
        found += [catalog.lost(e, messages[e.node_id]) for e in entries.values()
                  if e.node_id in messages]  # fmt: skip
        return found
