"""The node service: the operations the control API needs of a machine that runs sandboxes.
The API depends on this protocol only; `sandboxd.node.local.LocalNode` implements it in-process,
and a node on another machine can implement it over the wire. Failures are sandboxd.errors'
domain errors, which the API maps to statuses once (sandboxd/api/errors.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sandboxd.errors import SandboxError
    from sandboxd.node.models import LogEntry, SandboxConfig, SandboxInfo, SnapshotInfo
    from sandboxd.store.rows import MetricSample, SandboxRow, VolumeRow


class NodeService(Protocol):
    async def create(self, config: SandboxConfig) -> SandboxInfo:
        """Boot (or take a warm) sandbox of the config's template and start its envd.

        Raises:
            NotAllowed: a timeout of 0 or past the maximum.
            TemplateNotFound, TemplateError: no such template, or an unusable one.
            BootError, InitRefused: the sandbox did not come up (nothing of it is left).
        """
        ...

    async def kill(self, sandbox_id: str) -> None:
        """Raises SandboxNotFound; TeardownError: the host could not remove everything (a
        retry continues)."""
        ...

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        """Freeze a running sandbox; without `memory`, keep only its files (its resume a boot).

        Raises:
            SandboxNotFound; WrongState: already paused; SandboxError: the pause failed.
        """
        ...

    async def resume(self, sandbox_id: str, timeout_s: int) -> SandboxInfo:
        """Thaw a paused sandbox for `timeout_s` (boot it, if it was paused to disk).

        Raises:
            NotAllowed: the timeout; SandboxNotFound; WrongState: already running;
            SandboxError: the thaw failed.
        """
        ...

    async def connect(
        self, sandbox_id: str, timeout_s: int, memory: bool = True
    ) -> tuple[SandboxInfo, bool]:
        """Resume a paused sandbox (without `memory`, by a boot from its files), or extend a
        running one's end (never shorten it); the sandbox, and whether it was resumed.

        Raises:
            NotAllowed: the timeout; SandboxNotFound; SandboxError: the thaw failed.
        """
        ...

    async def snapshot(self, sandbox_id: str, name: str | None) -> SnapshotInfo:
        """Snapshot a running sandbox, briefly frozen (it keeps its id, end and processes), as
        a template build a create can boot; `name`: `[namespace/]alias[:tag]`.

        Raises:
            NotAllowed: a bad name; SandboxNotFound: unknown or paused; WrongState: being paused
            or resumed; SandboxError: the capture failed.
        """
        ...

    async def fork(
        self, sandbox_id: str, timeout_s: int, count: int
    ) -> list[SandboxInfo | SandboxError]:
        """`count` new sandboxes, each for `timeout_s`, of a running sandbox's files (not of its
        processes: they cold-boot); each entry a child, or the error that kept it from starting.
        The sandbox runs on untouched.

        Raises:
            NotAllowed: the timeout; SandboxNotFound; WrongState: it is paused;
            SandboxError: its files could not be captured.
        """
        ...

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        """End the sandbox `timeout_s` from now, within its maximum length.

        Raises:
            SandboxNotFound: unknown or paused; NotAllowed: the maximum length is used up.
        """
        ...

    async def update_network(self, sandbox_id: str, update: dict[str, Any]) -> None:
        """Replace a running sandbox's egress rules with `update` (E2B's `PUT
        /sandboxes/{id}/network` body under its wire names, unset fields left out).

        Raises:
            SandboxNotFound: unknown or paused.
            HostError: the rules were refused (the old ones stand).
        """
        ...

    async def list_sandboxes(self) -> list[SandboxInfo]:
        """Every sandbox, running or paused (one whose kill stopped halfway too)."""
        ...

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        """The sandbox (one whose kill stopped halfway too), or None."""
        ...

    async def metrics(
        self, sandbox_id: str, start_s: int | None, end_s: int | None, team_id: str
    ) -> list[MetricSample]:
        """The samples of the team's sandbox in [start_s, end_s] (None: unbounded), oldest
        first; none for another team's."""
        ...

    async def logs(
        self,
        sandbox_id: str,
        since_us: int | None,
        until_us: int | None,
        limit: int,
        newest_first: bool,
    ) -> list[LogEntry]:
        """At most `limit` lines of a running or paused sandbox's log in [since_us, until_us],
        oldest first, or newest first.

        Raises:
            SandboxNotFound: unknown, or killed meanwhile.
            SandboxError: its log could not be read.
        """
        ...


class PausedMoves(Protocol):
    """What a node agent offers the cluster's gateways beyond the API's operations: a sandbox
    paused to disk moved to another node once its own is gone (sandboxd.cluster.moves)."""

    async def paused_record(self, sandbox_id: str) -> SandboxRow:
        """The record another node resumes the sandbox, paused to disk, from.

        Raises:
            SandboxNotFound; NotMovable: not paused to disk, mounting volumes, or on a node that
            shares no registry.
        """
        ...

    async def adopt_paused(self, record: SandboxRow) -> SandboxInfo:
        """Take the sandbox of `record` (paused to disk on another node) as this node's own,
        paused to disk: its resume boots it here, pulling the layers this node lacks.

        Raises:
            NotMovable: not a disk-paused sandbox's record; SandboxError: an unreadable one;
            WrongState: this node has a sandbox of that id.
        """
        ...


class NodeVolumes(Protocol):
    """The volumes a node agent holds on its disk (a gateway keeps their records in the shared
    database; their files are reached by the content API's relay, sandboxd.cluster.volumes)."""

    async def create_volume(self, name: str, size_mb: int | None, team_id: str) -> VolumeRow:
        """Make the team's volume on this node's disk (its own record kept in the node's store,
        as serve keeps one).

        Raises:
            NotAllowed: a bad name or size, or the team has the name here.
            HostError: its filesystem could not be made.
        """
        ...

    async def delete_volume(self, volume_id: str) -> None:
        """Remove the volume, record and filesystem.

        Raises:
            VolumeNotFound: not on this node.
            WrongState: a sandbox here has it mounted.
        """
        ...

    async def list_volumes(self) -> list[VolumeRow]:
        """Every volume on this node's disk, as its own records have them."""
        ...


class NodeAgentService(NodeService, PausedMoves, Protocol):
    """Every operation of a node agent's internal API (sandboxd.node.http_api)."""
