"""The rows of sandboxd's store: plain data, the same whichever backend keeps them
(sandboxd.store.interface). JSON-shaped fields (`metadata`, `recipe`, …) are stored as a
backend sees fit and come back as they went in."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

KEY_PREFIX_SHOWN = 10  # the characters of an API key kept in the clear, to tell keys apart
# The team of every key and row that is not another's (sandboxd/store/migrations/0008_teams.sql
# makes it): a single user's, whose keys see what they did before teams. Its slug is the
# namespace of its template names.
DEFAULT_TEAM_ID = "00000000-0000-4000-8000-000000000001"
DEFAULT_TEAM_SLUG = "sandboxd"


def key_hash(key: str) -> str:
    """What the store keeps of an API key (never the key itself)."""
    # Keys carry 160 random bits: a plain SHA-256 is enough, no slow hash needed.
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class TemplateRow:
    template_id: str
    alias: str | None
    build_id: str
    rootfs: str
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    build_status: str
    envd_version: str
    created_at: int
    updated_at: int
    public: bool = False
    last_spawned_at: int | None = None
    spawn_count: int = 0
    build_count: int = 1
    team_id: str = DEFAULT_TEAM_ID  # its owner; a public one any team's creates boot too


@dataclass
class SandboxRow:
    sandbox_id: str
    template_id: str
    alias: str | None
    state: str
    started_at: int
    end_at: int
    timeout_s: int
    secure: bool
    auto_pause: bool
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    envd_version: str
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    uid_base: int | None = None  # the first host uid of the sandbox's range
    default_user: str | None = None  # envd's, from the template; None: E2B's `user`
    default_workdir: str | None = None  # and /home/user
    pause_mode: str | None = None  # while paused: "full" (frozen) or "filesystem" (on disk)
    # Paused to disk: what its resume boots (sandboxd.lifecycle.disk_pause.disk_image).
    disk_image: dict[str, Any] | None = None
    team_id: str = DEFAULT_TEAM_ID


@dataclass(frozen=True)
class MetricSample:
    ts: int
    cpu_count: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    mem_cache: int
    disk_used: int
    disk_total: int


@dataclass
class BuildRow:
    build_id: str
    template_id: str
    status: str  # waiting | building | ready | error
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    created_at: int
    updated_at: int
    finished_at: int | None = None
    tags: list[str] = field(default_factory=list)
    recipe: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    reason: dict[str, Any] | None = None
    node_id: str | None = None  # the node agent running it (a cluster's); None: serve's own


@dataclass(frozen=True)
class LogLine:
    seq: int
    at: int
    level: str  # debug | info | warn | error
    message: str
    step: str | None = None


@dataclass(frozen=True)
class SnapshotRow:
    """A build that is a snapshot of a sandbox (its image the sandbox's files at `created_at`)."""

    build_id: str
    template_id: str
    sandbox_id: str
    created_at: int


@dataclass(frozen=True)
class TagRow:
    tag: str
    build_id: str
    created_at: int


@dataclass(frozen=True)
class VolumeRow:
    volume_id: str  # a UUID
    name: str  # unique among its team's volumes
    size_mb: int  # its filesystem's size: what it may hold
    created_at: int
    team_id: str = DEFAULT_TEAM_ID
    node_id: str | None = None  # a cluster's: the node whose disk holds it (None: serve's own)


@dataclass(frozen=True)
class TeamRow:
    team_id: str  # a UUID
    name: str  # unique
    slug: str  # unique: the namespace of the team's template names (`slug/alias:tag`)
    created_at: int


@dataclass
class CatalogRow:
    """A sandbox of the cluster (sandboxd.cluster): the node that runs it, the team that owns
    it, and `info`, the sandbox as its create answered (its tokens left out), what is shown of
    it once its node is gone; `record`, while it is paused to disk, its node's SandboxRow (as
    JSON), what another node resumes it from (sandboxd.cluster.moves), or `unmovable`: why it
    has none."""

    sandbox_id: str
    node_id: str
    team_id: str
    created_at: int
    info: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None
    unmovable: str | None = None


@dataclass(frozen=True)
class CreateKeyRow:
    """An `Idempotency-Key` of a create, for the hash of the API key that sent it (`scope`):
    `claim` names the create that makes its sandbox; `sandbox_id` is None until it has."""

    scope: str
    key: str
    claim: str
    sandbox_id: str | None
    created_at: int


@dataclass
class NodeRow:
    """A node agent of a cluster, as its last heartbeat wrote it (only a shared database has
    these)."""

    node_id: str
    api_url: str  # the node's internal API, "http://10.1.2.3:49990"
    proxy_address: str  # the node's internal proxy, "10.1.2.3:49991"
    heartbeat_us: int  # the last heartbeat (µs since the epoch)
    lease_s: int  # alive while now < heartbeat_us + lease_s * 1e6
    draining: bool = False  # set by an operator: nothing new is placed there
    # cpus, memory_mb, max_sandboxes, sandboxes, cpu_requested, cpu_usage, memory_used_mb,
    # warm ({template_id: n}), templates ([template ids whose layers the node holds]).
    status: dict[str, Any] = field(default_factory=dict)
