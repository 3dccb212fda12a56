"""A gateway's volumes. Each volume's filesystem is on one node agent's disk, its home (a volume
is an ext4 image loop-mounted there, as serve keeps it; no filesystem is shared between
machines); its record is in the shared database with that node's id, where every gateway
finds it. A create places the volume as a sandbox is placed (sandboxd.cluster.placement) and
has the node make it (the node keeps its own record too, as serve does, so that it mounts the
volume again after a reboot and resolves sandboxes' mounts of it); a delete, and every
content-API request, goes to the home node. A sandbox that mounts volumes is placed on their
home (`mounts_home`), and the home refuses to delete a volume its sandboxes have mounted.

Tokens are signed with a key every gateway derives from the cluster token
(sandboxd.cluster.keys), so a token one gateway handed out opens the volume through any
other."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import TYPE_CHECKING

from sandboxd.cluster import placement
from sandboxd.errors import (
    NodeDraining,
    NodeUnreachable,
    NoNodeAvailable,
    NotAllowed,
    StoreUnavailable,
    VolumeNodeUnavailable,
    VolumeNotFound,
)
from sandboxd.ids import now_us
from sandboxd.store.rows import DEFAULT_TEAM_ID
from sandboxd.volumes.catalog import NAME

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, Callable

    from sandboxd.cluster.nodes import Remote
    from sandboxd.node.content_stream import Answer
    from sandboxd.node.models import SandboxConfig
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import NodeRow, VolumeRow
    from sandboxd.volumes.tokens import VolumeTokens


class ClusterVolumes:
    """Implements sandboxd.api.context's Volumes over the shared `store` and the nodes'
    clients (`client(node)`), and sandboxd.api.volume_relay's VolumeContent."""

    def __init__(self, store: Store, client: Callable[[NodeRow], Remote],
                 tokens: VolumeTokens) -> None:  # fmt: skip
        self.store = store
        self.client = client
        self.tokens = tokens

    async def create(self, name: str, size_mb: int | None = None,
                     team_id: str = DEFAULT_TEAM_ID) -> VolumeRow:  # fmt: skip
        """Make the team's volume on a node and record it there.

        Raises:
            NotAllowed: the name breaks the rule or the team has it (a create through another
                gateway may take it meanwhile), or the node refused the size.
            NoNodeAvailable: no node took it. StoreUnavailable.
        """
        if not NAME.match(name):
            raise NotAllowed("Invalid volume name")
        if self.store.volume_named(name, team_id) is not None:
            raise NotAllowed(f"Volume with name '{name}' already exists")
        node, made = await self._made(name, size_mb, team_id)
        row = dataclasses.replace(made, node_id=node.node_id)
        try:
            await self.store.write(functools.partial(self.store.add_volume, row))
        except BaseException as exc:
            with contextlib.suppress(Exception):  # its name taken meanwhile, or the store down
                await self.client(node).delete_volume(row.volume_id)
            if isinstance(exc, Exception) and self._named(name, team_id):
                raise NotAllowed(f"Volume with name '{name}' already exists") from exc
            raise
        return row

    def _named(self, name: str, team_id: str) -> bool:
        """Whether the team has a volume `name` (False when the store cannot say)."""
        try:
            return self.store.volume_named(name, team_id) is not None
        except StoreUnavailable:
            return False

    async def _made(self, name: str, size_mb: int | None,
                    team_id: str) -> tuple[NodeRow, VolumeRow]:  # fmt: skip
        """The volume made on the first node of the placement's choice that takes it."""
        refusals: dict[str, str] = {}
        while True:
            node = placement.choose(self.store.nodes(), "", 0, now_us(), refusals)
            if node is None:
                tried = "; ".join(f"{n}: {why}" for n, why in refusals.items())
                raise NoNodeAvailable("no node can take the volume: " +
                                      (f"tried {tried}" if tried else "none is alive and undrained"))  # fmt: skip
            try:
                return node, await self.client(node).create_volume(name, size_mb, team_id)
            except (NodeUnreachable, NodeDraining) as exc:
                refusals[node.node_id] = str(exc)

    def get(self, volume_id: str, team_id: str | None = None) -> VolumeRow:
        """Raises VolumeNotFound: no such volume (of the team's)."""
        row = self.store.volume(volume_id)
        if row is None or team_id not in (None, row.team_id):
            raise VolumeNotFound
        return row

    def all(self, team_id: str | None = None) -> list[VolumeRow]:
        return self.store.volumes(team_id)

    async def delete(self, volume_id: str, team_id: str | None = None) -> None:
        """Remove the volume from its home, then its record.

        Raises:
            VolumeNotFound; WrongState: a sandbox on its home has it mounted;
            VolumeNodeUnavailable: its home is gone or does not answer. StoreUnavailable.
        """
        row = self.get(volume_id, team_id)
        node = home(self.store, row)
        try:
            await self.client(node).delete_volume(volume_id)
        except VolumeNotFound:
            pass  # gone from its node already (a delete whose record outlived it)
        except NodeUnreachable as exc:
            raise _unanswered(row, node.node_id, exc) from exc
        await self.store.write(functools.partial(self.store.delete_volume, volume_id))

    async def content(
        self,
        volume: VolumeRow,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes] | None,
    ) -> Answer:
        """A content-API request (`target`: its path below the volume API's prefix, and query)
        sent to the volume's home, which runs it on its files (sandboxd.api.volume_content.
        trusted); the answer left to stream (sandboxd.node.remote.RemoteNode.volume_content).

        Raises:
            VolumeNodeUnavailable: its home is gone or does not answer.
        """
        node = home(self.store, volume)
        try:
            return await self.client(node).volume_content(method, target, headers, body)
        except NodeUnreachable as exc:
            raise _unanswered(volume, node.node_id, exc) from exc


def home(store: Store, row: VolumeRow) -> NodeRow:
    """The volume's node while its lease runs.

    Raises:
        VolumeNodeUnavailable: the volume is on no node (a serve's), or on one whose lease
            expired.
    """
    node = None if row.node_id is None else store.node(row.node_id)
    if node is None or not placement.alive(node, now_us()):
        where = "no node of this cluster" if row.node_id is None else f"node {row.node_id}"
        why = "" if row.node_id is None else ", whose lease expired"
        raise VolumeNodeUnavailable(f"volume '{row.name}' is on {where}{why}: its files "
                                    "cannot be reached until the node is back")  # fmt: skip
    return node


def _unanswered(row: VolumeRow, node_id: str, exc: Exception) -> VolumeNodeUnavailable:
    return VolumeNodeUnavailable(f"volume '{row.name}' is on node {node_id}, which does not "
                                 f"answer ({exc}): its files cannot be reached")  # fmt: skip


def mounts_home(store: Store, config: SandboxConfig) -> NodeRow | None:
    """The node that must run a sandbox mounting volumes: their home (None: it mounts none
    the cluster knows; its node refuses names it does not hold, as serve refuses them).

    Raises:
        NotAllowed: the volumes are on different nodes (named, with their nodes).
        VolumeNodeUnavailable: their home's lease expired, or it is draining.
    """
    wanted = config.options.get("volumeMounts") or []
    found = [v for m in wanted if (v := store.volume_named(m["name"], config.team_id))]
    if not found:
        return None
    if len({v.node_id for v in found}) > 1:
        where = ", ".join(f"'{v.name}' on node {v.node_id}" for v in found)
        raise NotAllowed(f"a sandbox can only mount volumes of one node: {where}")
    node = home(store, found[0])
    if node.draining:
        raise VolumeNodeUnavailable(f"volume '{found[0].name}' is on node {node.node_id}, "
                                    "which is draining: it takes no new sandboxes")  # fmt: skip
    return node
