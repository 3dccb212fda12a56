"""The node service in this process: sandboxd.node.service's operations over the lifecycle's
SandboxManager, its sandboxes handed out as copies (sandboxd.node.models), never themselves."""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxError, SandboxNotFound
from sandboxd.lifecycle.egress import update_network
from sandboxd.lifecycle.sandbox import CreateRequest
from sandboxd.lifecycle.tokens import without_kept
from sandboxd.node.models import LogEntry, SandboxInfo, SnapshotInfo

if TYPE_CHECKING:
    from sandboxd.lifecycle.manager import SandboxManager
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.node.catalog_record import NodeCatalog
    from sandboxd.node.models import SandboxConfig
    from sandboxd.store.rows import MetricSample, SandboxRow, VolumeRow
    from sandboxd.volumes.catalog import VolumeCatalog


class LocalNode:
    """Implements `sandboxd.node.service.NodeAgentService` with the sandboxes of `manager`;
    a node agent's also writes the catalog rows of the creates whose gateway asks it to."""

    def __init__(self, manager: SandboxManager, catalog: NodeCatalog | None = None) -> None:
        self._manager = manager
        self._catalog = catalog

    async def create(self, config: SandboxConfig) -> SandboxInfo:
        request = CreateRequest(
            config.template,
            config.timeout_s,
            config.secure,
            config.auto_pause,
            dict(config.metadata),
            dict(config.env_vars),
            copy.deepcopy(config.options),
            config.team_id,
        )
        if not config.catalog or self._catalog is None:
            return self._info(await self._manager.create(request))
        with self._catalog.recording() as record:
            sandbox = await self._manager.create(request, record)
        return dataclasses.replace(self._info(sandbox), cataloged=True)

    async def kill(self, sandbox_id: str) -> None:
        await self._manager.kill(sandbox_id)

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        await self._manager.pause(sandbox_id, memory)

    async def resume(self, sandbox_id: str, timeout_s: int) -> SandboxInfo:
        return self._info(await self._manager.resume(sandbox_id, timeout_s))

    async def connect(
        self, sandbox_id: str, timeout_s: int, memory: bool = True
    ) -> tuple[SandboxInfo, bool]:
        sandbox, resumed = await self._manager.connect(sandbox_id, timeout_s, memory)
        return self._info(sandbox), resumed

    async def snapshot(self, sandbox_id: str, name: str | None) -> SnapshotInfo:
        taken = await self._manager.snapshot(sandbox_id, name)
        return SnapshotInfo(taken.snapshot_id, list(taken.names))

    async def fork(
        self, sandbox_id: str, timeout_s: int, count: int
    ) -> list[SandboxInfo | SandboxError]:
        children = await self._manager.fork(sandbox_id, timeout_s, count)
        return [c if isinstance(c, SandboxError) else self._info(c) for c in children]

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        await self._manager.set_timeout(sandbox_id, timeout_s)

    async def update_network(self, sandbox_id: str, update: dict[str, Any]) -> None:
        await update_network(self._manager, sandbox_id, copy.deepcopy(update))

    async def list_sandboxes(self) -> list[SandboxInfo]:
        return [self._info(s) for s in self._manager.all()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        sandbox = self._manager.get(sandbox_id)
        if sandbox is None:  # or recorded in the catalog, its create under way
            return None if self._catalog is None else self._catalog.creating(sandbox_id)
        return self._info(sandbox)

    async def metrics(
        self, sandbox_id: str, start_s: int | None, end_s: int | None, team_id: str
    ) -> list[MetricSample]:
        return self._manager.store.metrics(sandbox_id, start_s, end_s, team_id)

    async def logs(
        self,
        sandbox_id: str,
        since_us: int | None,
        until_us: int | None,
        limit: int,
        newest_first: bool,
    ) -> list[LogEntry]:
        sandbox = self._manager.existing(sandbox_id)
        if sandbox.box is None:  # paused to disk: its log went with its files' host
            return []
        try:
            runtime = self._manager.runtime
            entries = await runtime.logs(sandbox.box, since_us, until_us, limit, newest_first)
        except SandboxError as exc:
            if self._manager.get(sandbox_id) is None:  # killed meanwhile
                raise SandboxNotFound(sandbox_id) from exc
            raise
        return [LogEntry(e.timestamp_us, e.level, e.logger, e.message) for e in entries]

    async def paused_record(self, sandbox_id: str) -> SandboxRow:
        return await self._manager.moves.record(self._manager.existing(sandbox_id))

    async def adopt_paused(self, record: SandboxRow) -> SandboxInfo:
        return self._info(await self._manager.moves.adopt(record))

    def _info(self, sandbox: Sandbox) -> SandboxInfo:
        return sandbox_info(self._manager, sandbox)


def sandbox_info(manager: SandboxManager, sandbox: Sandbox) -> SandboxInfo:
    """`sandbox` as the node service shows it: a copy."""
    row = sandbox.row
    network = row.options.get("network") or {}
    public = network.get("allowPublicTraffic") is not False
    return SandboxInfo(
        sandbox_id=row.sandbox_id,
        template_id=row.template_id,
        alias=row.alias,
        state=row.state,
        running=sandbox.running,
        started_at=row.started_at,
        end_at=row.end_at,
        cpu_count=row.cpu_count,
        memory_mb=row.memory_mb,
        disk_size_mb=row.disk_size_mb,
        envd_version=row.envd_version,
        auto_pause=row.auto_pause,
        metadata=dict(row.metadata),
        options=copy.deepcopy(without_kept(row.options)),
        envd_token=sandbox.token,
        traffic_token=None if public else manager.tokens.of(row)[1],
        pause_mode=row.pause_mode if row.state == "paused" else None,
        team_id=row.team_id,
    )


class LocalVolumes:
    """Implements `sandboxd.node.service.NodeVolumes` over this node's volume catalog."""

    def __init__(self, catalog: VolumeCatalog) -> None:
        self._catalog = catalog

    async def create_volume(self, name: str, size_mb: int | None, team_id: str) -> VolumeRow:
        return await self._catalog.create(name, size_mb, team_id)

    async def delete_volume(self, volume_id: str) -> None:
        await self._catalog.delete(volume_id)

    async def list_volumes(self) -> list[VolumeRow]:
        return self._catalog.all()
