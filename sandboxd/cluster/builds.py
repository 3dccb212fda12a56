"""`ClusterBuilds`: a gateway's template builds (sandboxd.builds.work.BuildWork). Each build is
handed to one node agent, chosen by placement when it is requested and recorded on the build
(`node_id`): its uploads are relayed there (streamed, bounded as serve bounds them, by the
node's own builder), and its start runs it there; the node writes its status and log to the
shared database, which is where the gateway reads them (any gateway: the endpoints are serve's).
A build whose node is gone is ended in error by the reconciliation (sandboxd.cluster.reconcile),
never left `building`. One no node can take when requested (all drained, stopped or full) waits
for one until a create's deadline after its request (its files and its start wait that long for
a node), then ends in error naming why; the reconciliation ends those nobody came back to."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Final, TypeVar

from sandboxd.builds.records import mark_failed, record
from sandboxd.builds.uploads import MAX_UPLOAD_BYTES
from sandboxd.cluster import placement
from sandboxd.errors import (
    BuildNodeLost,
    LengthRequired,
    NodeUnreachable,
    NoNodeAvailable,
    NotAllowed,
    SandboxError,
    UploadTooLarge,
)
from sandboxd.ids import now_us

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from sandboxd.builds.recipe import Recipe
    from sandboxd.cluster.nodes import ClusterNodes, Remote
    from sandboxd.store.rows import BuildRow, LogLine, NodeRow

log = logging.getLogger("sandboxd.cluster.builds")

T = TypeVar("T")

UNFINISHED: Final = ("waiting", "building")
PLACEMENT_POLL_S: Final = 1.0  # the node rows change with heartbeats (every 2 s by default)


class ClusterBuilds:
    """Implements BuildWork over the nodes of `nodes` (their clients, the shared store)."""

    def __init__(self, nodes: ClusterNodes) -> None:
        self.nodes = nodes
        self.store = nodes.store

    async def assign(self, build: BuildRow) -> None:
        # No node now: the build waits for one (an undrained or restarted node) until its
        # deadline (`_placed`), and ends in error then, which its status shows, as the SDKs
        # read a build's end.
        node = self._choose(build)
        if node is None:
            log.warning("build %s waits for a node: %s", build.build_id, self._no_node(build))
            return
        build.node_id = node.node_id
        await self.store.write(functools.partial(self.store.put_build, build))

    async def present(self, template_id: str, files_hash: str) -> bool:
        build = self._latest(template_id)
        return await self._on(build, lambda n: n.upload_present(template_id, files_hash))

    async def receive(
        self, template_id: str, files_hash: str, body: AsyncIterator[bytes], length: int | None
    ) -> None:
        # Refused before a byte is relayed; the node checks the body against the length.
        if length is None:
            raise LengthRequired("an upload needs a Content-Length")
        if length > MAX_UPLOAD_BYTES:
            raise UploadTooLarge(
                f"the upload's {length} bytes are over the limit of {MAX_UPLOAD_BYTES}"
            )
        build = self._latest(template_id)
        await self._on(build, lambda n: n.upload(template_id, files_hash, body, length))

    async def start(self, build: BuildRow, recipe: Recipe) -> None:
        recipe_json = recipe.model_dump()
        try:
            await self._on(build, lambda n: n.start_build(build.template_id, build.build_id,
                                                          recipe_json))  # fmt: skip
        except NoNodeAvailable:
            return  # the build ended in error for it: its status says so

    def log_page(self, build: BuildRow, offset: int, limit: int) -> list[LogLine]:
        return self.store.log_lines(build.build_id, offset, limit)

    async def forget(self, template_id: str) -> None:
        """Every live node told (any may hold the template's uploads or layers); one that does
        not answer keeps them until its own collection."""
        now = now_us()
        for node in self.store.nodes():
            if not placement.alive(node, now):
                continue
            try:
                await self.nodes.client(node).forget_template(template_id)
            except SandboxError as exc:
                log.warning("node %s did not forget template %s: %s", node.node_id,
                            template_id, exc)  # fmt: skip

    async def fail_lost(self) -> None:
        """End in error the unfinished builds whose node's lease expired (the reconciliation's
        round: the node cannot write their end any more), and those that waited for a node
        past their deadline."""
        now = now_us()
        nodes = {n.node_id: n for n in self.store.nodes()}
        unfinished = [b for status in UNFINISHED for b in self.store.builds(status=status)]
        for build in unfinished:
            if build.node_id is None:
                if now > self._deadline_us(build):
                    await self._fail_unplaced(build)
                continue
            node = nodes.get(build.node_id)
            if node is None or not placement.alive(node, now):
                message = str(BuildNodeLost(build.build_id, build.node_id))
                log.warning("%s: the build ends in error", message)
                mark_failed(build, message, None)
                await record(self.store, build)

    def _steps_cached_on(self, build: BuildRow, nodes: list[NodeRow], now: int) -> NodeRow | None:
        """The node that ran the template's previous build, if it can take this one: the
        steps' layer cache is a node's own, so a rebuild there reuses the steps it ran."""
        earlier = [b for b in self.store.builds(build.template_id)
                   if b.node_id is not None and b.build_id != build.build_id]  # fmt: skip
        if not earlier:
            return None
        last = max(earlier, key=lambda b: b.created_at)
        able = placement.candidates(nodes, now, ())
        return next((n for n in able if n.node_id == last.node_id), None)

    def _latest(self, template_id: str) -> BuildRow:
        """The template's latest build, which its uploads are for.

        Raises:
            NotAllowed: it has none unfinished.
        """
        template = self.store.template(template_id)
        build = None if template is None else self.store.build(template.build_id)
        if build is None or build.status not in UNFINISHED:
            raise NotAllowed(f"template {template_id} has no build waiting for its files: "
                             "request one first (POST /v3/templates)")  # fmt: skip
        return build

    async def _on(self, build: BuildRow, call: Callable[[Remote], Awaitable[T]]) -> T:
        """`call` on the build's node.

        Raises:
            NoNodeAvailable: it had none and none took it by its deadline (it ended in error).
            BuildNodeLost: its lease expired, or it does not answer.
        """
        node_id = build.node_id or await self._placed(build)
        node: NodeRow | None = self.store.node(node_id)
        if node is None or not placement.alive(node, now_us()):
            raise BuildNodeLost(build.build_id, node_id)
        try:
            return await call(self.nodes.client(node))
        except NodeUnreachable as exc:
            raise BuildNodeLost(build.build_id, node.node_id,
                                f"which does not answer ({exc})") from exc  # fmt: skip

    async def _placed(self, build: BuildRow) -> str:
        """Hand the build that has no node to one, waiting for one until its deadline; that
        node's id.

        Raises:
            NoNodeAvailable: none came by then: the build ended in error for it.
        """
        while (node := self._choose(build)) is None:
            if now_us() > self._deadline_us(build):
                raise NoNodeAvailable(await self._fail_unplaced(build))
            await asyncio.sleep(PLACEMENT_POLL_S)
        build.node_id = node.node_id
        await self.store.write(functools.partial(self.store.put_build, build))
        return node.node_id

    def _choose(self, build: BuildRow) -> NodeRow | None:
        nodes, now = self.store.nodes(), now_us()
        return self._steps_cached_on(build, nodes, now) or placement.choose(
            nodes, build.template_id, build.cpu_count, now, reserved=self.nodes.reserved
        )

    def _deadline_us(self, build: BuildRow) -> int:
        """Until when a build with no node waits for one: a create's deadline after its
        request, the time a sandbox's create waits for a node too (a build's first work is
        booting one)."""
        return build.created_at + int(self.nodes.deadline_s * 1e6)

    def _no_node(self, build: BuildRow) -> str:
        return (f"no live node can build {build.build_id}: none is alive, not draining and "
                "with room")  # fmt: skip

    async def _fail_unplaced(self, build: BuildRow) -> str:
        """End the build in error for having no node, unless one took it meanwhile (read
        again: another gateway may have handed it on); the message."""
        message = self._no_node(build) + f" (waited {self.nodes.deadline_s:.0f} s)"
        latest = self.store.build(build.build_id)
        if latest is not None and latest.node_id is None and latest.status in UNFINISHED:
            log.warning("%s: the build ends in error", message)
            mark_failed(latest, message, None)
            await record(self.store, latest)
        return message
