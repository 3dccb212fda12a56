"""The plain data that crosses the node service (sandboxd.node.service): what the API asks a
node for and what it renders of the answers. Frozen values, copies of the node's own records:
changing one changes nothing on the node."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sandboxd.store.rows import DEFAULT_TEAM_ID


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """A validated create. `options` are the create's settings the node stores and shows,
    under their wire names; of them it enforces `allow_internet_access`, `network`'s allowOut
    (addresses and domains), denyOut, dnsServers, allowPublicTraffic, maskRequestHost and
    autoPauseMemory (false: the pause at endAt is to disk), autoResume (traffic through the
    proxy resumes it) and volumeMounts (each volume mounted at its path), not yet mcp (only
    shown)."""

    template: str
    timeout_s: int
    secure: bool
    auto_pause: bool
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    team_id: str = DEFAULT_TEAM_ID  # the owner: its templates (or public ones) and volumes
    # A gateway's: the node writes the sandbox's catalog row itself (sandboxd.node.
    # catalog_record), and says so in the answer's `cataloged`. A node older than this field
    # ignores it and says nothing: the gateway writes the row, as it did before.
    catalog: bool = False


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """One sandbox as the API shows it. Times are µs since the epoch."""

    sandbox_id: str
    template_id: str
    alias: str | None
    state: str  # running or paused, as listed
    running: bool  # running and reachable: not paused, not being killed
    started_at: int
    end_at: int
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    envd_version: str
    auto_pause: bool
    metadata: dict[str, str]
    options: dict[str, Any]  # the create's settings (see SandboxConfig), after network updates
    envd_token: str | None  # envd's access token: secure sandboxes only
    traffic_token: str | None  # the token its ports ask for, without public traffic
    pause_mode: str | None = None  # paused: "full" (in memory) or "filesystem" (on disk)
    team_id: str = DEFAULT_TEAM_ID  # its owner: only the team's keys see it
    cataloged: bool = False  # a create's answer: its node wrote its catalog row (see SandboxConfig)


def recorded(info: SandboxInfo) -> dict[str, object]:
    """What a cluster's catalog keeps of a sandbox (sandboxd.store.rows CatalogRow's `info`):
    everything but its tokens and `cataloged`, which a gateway older than that field would not
    take back as a SandboxInfo."""
    kept = dataclasses.asdict(dataclasses.replace(info, envd_token=None, traffic_token=None))
    del kept["cataloged"]
    return kept


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of a sandbox's log."""

    timestamp_us: int
    level: str
    logger: str  # envd's logger, or the process that wrote it (systemd, envd, ...)
    message: str


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A snapshot just taken: the id a create boots it by (`alias:tag` or `templateID:tag`)
    and its template's names."""

    snapshot_id: str
    names: list[str]
