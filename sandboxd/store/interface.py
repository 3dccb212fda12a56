"""What sandboxd asks of its store: the tables it keeps, one protocol per group of them, and
`Store`, all of them over one database. Everything above the store types against `Store`; only
the entry points that put sandboxd together (serve, the CLI: sandboxd.daemon.serve.open_store)
open a backend: sandboxd.store.sqlite, the default, in the state directory; or
sandboxd.store.postgres, a PostgreSQL database (the ground for sandboxds on several machines
sharing one). Rows: sandboxd.store.rows.

Reads return what is committed, at once: they are synchronous, which SQLite's lookups in pages
in memory allow, and PostgreSQL's at the cost of a round trip on the event loop (a fraction of a
millisecond on loopback or a LAN); a database farther away will want them awaited, a change to
every caller. A PostgreSQL store whose server cannot be reached raises
sandboxd.errors.StoreUnavailable from reads and writes (the API answers 503).

What both backends keep alike: a row's key is its first field, and a `put_` replaces only the
row of that key (another unique column, a template's alias, clashing is the backend's integrity
error); lists come in the order each method names; JSON fields come back equal to what went in
(an object's keys not necessarily in their order).

Writes (the `add_`, `put_`, `delete_` methods, `count_spawn` and `uncount_spawn`) are handed,
bound to their arguments, to `Store.write`, which runs them in order in one transaction:

    await store.write(
        functools.partial(store.put_template, template),
        functools.partial(store.put_build, build),
    )

All of them commit or none does; `write` returns once they are committed, so a read after it
sees them. Called directly, outside `write`, a write method commits on its own: only before the
event loop serves (serve's startup, the CLI), where nothing else runs.

Not in the store, only in the memory of one sandboxd: the lifecycle's list of sandboxes
(`SandboxManager._sandboxes`, rebuilt at start from the runtime's records on the host and the
store's rows: sandboxd.lifecycle.adoption), its warm pool, and the idempotency keys of creates
(sandboxd.api.idempotency, forgotten on a restart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sandboxd.store.rows import DEFAULT_TEAM_ID

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sandboxd.store.rows import (
        BuildRow,
        CatalogRow,
        CreateKeyRow,
        LogLine,
        MetricSample,
        NodeRow,
        SandboxRow,
        SnapshotRow,
        TagRow,
        TeamRow,
        TemplateRow,
        VolumeRow,
    )


class Keys(Protocol):
    """The API keys, kept as their `key_hash` and first KEY_PREFIX_SHOWN characters, each of
    one team."""

    def add_key(self, key: str, now_us: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        """Record `key` as the team's; nothing when it is recorded already."""

    def has_key(self, key: str) -> bool: ...

    def team_of_key(self, key: str) -> str | None:
        """The id of the team of a recorded key; None for a key not recorded."""


class Teams(Protocol):
    """The teams (the default one, DEFAULT_TEAM_ID, made by the schema)."""

    def add_team(self, t: TeamRow) -> None:
        """Insert `t`.

        Raises:
            Exception: the backend's integrity error when its id, name or slug is taken.
        """

    def team(self, id_or_name: str) -> TeamRow | None:
        """The team of that id, else of that name."""

    def teams(self) -> list[TeamRow]:
        """All of them, oldest first (ties by id)."""


class Templates(Protocol):
    def put_template(self, t: TemplateRow) -> None:
        """Insert `t`, or replace the row of its template_id."""

    def count_spawn(self, template_id: str, at_us: int) -> None:
        """One more sandbox of the template; nothing when it was deleted meanwhile (a create
        reads the template before its boot and must not write that copy back)."""

    def uncount_spawn(self, template_id: str) -> None:
        """Take back a count_spawn whose sandbox did not start (a node counts a create while
        it starts: sandboxd.node.catalog_record); `last_spawned_at` keeps the attempt's time."""

    def template(self, id_or_alias: str, team_id: str = DEFAULT_TEAM_ID) -> TemplateRow | None:
        """The template of that id (whoever's), else the team's of that alias, else a public
        one of that alias (the oldest). Aliases are unique per team."""

    def templates(self, team_id: str | None = None) -> list[TemplateRow]:
        """All of them (or the team's), oldest first."""

    def delete_template(self, template_id: str) -> None: ...


class Sandboxes(Protocol):
    def put_sandbox(self, s: SandboxRow) -> None:
        """Insert `s`, or replace the row of its sandbox_id."""

    def sandboxes(self) -> list[SandboxRow]:
        """All of them, oldest first (`started_at`, then `sandbox_id`)."""

    def delete_sandbox(self, sandbox_id: str) -> None: ...


class Samples(Protocol):
    """Metric samples of sandboxes and of the team (how many ran), and lifecycle events."""

    def add_metric(self, sandbox_id: str, m: MetricSample, team_id: str = DEFAULT_TEAM_ID) -> None:
        """A sample of a sandbox of the team's."""

    def metrics(self, sandbox_id: str, start: int | None, end: int | None,
                team_id: str = DEFAULT_TEAM_ID) -> list[MetricSample]:  # fmt: skip
        """Samples of the team's sandbox in [start, end] (Unix seconds; None = unbounded),
        oldest first."""

    def add_team_sample(self, ts: int, running: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        """How many of the team's sandboxes ran at `ts`."""

    def team_samples(
        self, start: int, end: int, team_id: str = DEFAULT_TEAM_ID
    ) -> list[tuple[int, int]]:
        """The team's (ts, running) in [start, end] (Unix seconds), oldest first."""

    def add_event(
        self,
        at_us: int,
        sandbox_id: str | None,
        kind: str,
        detail: str = "",
        team_id: str | None = None,
    ) -> None:
        """Record that `kind` (e.g. "create") happened at `at_us`, to a sandbox of `team_id`
        (None: of no team)."""

    def event_times(
        self, kind: str, start_us: int, end_us: int, team_id: str | None = None
    ) -> list[int]:
        """When events of `kind` (of the team's, when given) happened in [start_us, end_us],
        oldest first."""


class Builds(Protocol):
    """Template builds, their log lines, template tags (each names a build), and which builds
    are snapshots of sandboxes."""

    def put_build(self, b: BuildRow) -> None:
        """Insert `b`, or replace the row of its build_id."""

    def build(self, build_id: str) -> BuildRow | None: ...

    def builds(self, template_id: str | None = None, status: str | None = None) -> list[BuildRow]:
        """The builds of a template (or all), optionally in one status, oldest first."""

    def delete_builds(self, template_id: str) -> None:
        """A template's builds, their logs and its tags."""

    def add_log_lines(self, build_id: str, lines: Iterable[LogLine]) -> None:
        """Record `lines`, replacing any of the same `seq`."""

    def log_lines(self, build_id: str, offset: int, limit: int) -> list[LogLine]:
        """At most `limit` lines from `seq` `offset` on, in order."""

    def put_tag(self, template_id: str, tag: str, build_id: str, at_us: int) -> None:
        """Point the template's `tag` at `build_id`."""

    def delete_tag(self, template_id: str, tag: str) -> None: ...

    def tags(self, template_id: str) -> list[TagRow]:
        """The template's tags, oldest first."""

    def tag(self, template_id: str, tag: str) -> TagRow | None: ...

    def put_snapshot(self, s: SnapshotRow) -> None:
        """Record that a build is a snapshot (insert, or replace the row of its build_id)."""

    def snapshots(self) -> list[SnapshotRow]:
        """Every snapshot, oldest first."""

    def delete_snapshots(self, template_id: str) -> None:
        """The snapshot records of a template's builds."""


class Volumes(Protocol):
    """The volumes' records (their files are sandboxd.volumes.storage's)."""

    def add_volume(self, v: VolumeRow) -> None:
        """Insert `v`.

        Raises:
            Exception: the backend's error (sqlite3.IntegrityError) when its id, or its name
                in its team, is taken.
        """

    def volume(self, volume_id: str) -> VolumeRow | None: ...

    def volume_named(self, name: str, team_id: str = DEFAULT_TEAM_ID) -> VolumeRow | None:
        """The team's volume of that name."""

    def volumes(self, team_id: str | None = None) -> list[VolumeRow]:
        """All of them (or the team's), oldest first."""

    def delete_volume(self, volume_id: str) -> None: ...


class Catalog(Protocol):
    """The cluster's (sandboxd.cluster): which node runs each sandbox, the creates'
    Idempotency-Keys across gateways, and named leases of duties one gateway does at a time."""

    def add_catalog_entry(self, e: CatalogRow) -> None:
        """Insert `e`.

        Raises:
            Exception: the backend's integrity error when its sandbox_id is recorded.
        """

    def update_catalog_entry(self, e: CatalogRow) -> None:
        """Replace the node, info, record and unmovable of `e`'s sandbox (nothing when it is not
        there)."""

    def catalog_entry(self, sandbox_id: str) -> CatalogRow | None: ...

    def catalog(self) -> list[CatalogRow]:
        """All of them, oldest first (`created_at`, then `sandbox_id`)."""

    def node_catalog(self, node_id: str) -> list[CatalogRow]:
        """Those on the node, in `catalog`'s order."""

    def delete_catalog_entry(self, sandbox_id: str) -> None: ...

    def claim_create_key(self, k: CreateKeyRow, expired_before_us: int) -> None:
        """Record `k` unless its (scope, key) is recorded since `expired_before_us` (an older
        row is replaced): `create_key` then says whose claim won."""

    def create_key(self, scope: str, key: str) -> CreateKeyRow | None: ...

    def settle_create_key(self, scope: str, key: str, claim: str, sandbox_id: str) -> None:
        """The sandbox the create of `claim` made; nothing when another claim holds the key."""

    def release_create_key(self, scope: str, key: str, claim: str) -> None:
        """Forget the key if `claim` holds it (its create failed: a retry tries again)."""

    def take_lock(self, name: str, holder: str, now_us: int, until_us: int) -> None:
        """Hold `name` until `until_us` if it is free at `now_us` or `holder`'s already:
        `lock_holder` then says who holds it."""

    def lock_holder(self, name: str, now_us: int) -> str | None: ...

    def release_lock(self, name: str, holder: str) -> None:
        """Forget `name` if `holder` holds it (its duty is done)."""

    def drop_expired_locks(self, now_us: int) -> None:
        """Forget the leases that ran out before `now_us` (their holders died holding them)."""


class Nodes(Protocol):
    """The node agents of a cluster and their leases (written only in a shared database: a node
    by its heartbeats, an operator by draining it)."""

    def heartbeat_node(self, n: NodeRow) -> bool:
        """Insert `n`, or replace everything of its node_id's row but `draining` (a heartbeat
        never undoes a drain; a new row takes `n.draining`); the row's `draining`, read back by
        the same statement (a node learns an operator's drain without another round trip)."""

    def set_node_draining(self, node_id: str, draining: bool) -> bool:
        """Set the node's flag; False when there is no such node."""

    def nodes(self) -> list[NodeRow]:
        """Every registered node, ordered by node_id."""

    def node(self, node_id: str) -> NodeRow | None:
        """The registered node of that id (one row read: what routing a sandbox needs)."""

    def delete_node(self, node_id: str) -> None: ...


class Store(Keys, Teams, Templates, Sandboxes, Samples, Builds, Volumes, Nodes, Catalog, Protocol):
    """The tables of one sandboxd, in one database, written through `write`."""

    async def write(self, *changes: Callable[[], None]) -> None:
        """Run `changes` (write methods bound to their arguments) in order in one transaction;
        returns once it is committed.

        Raises:
            StoreUnavailable: the database server cannot be reached (PostgreSQL); nothing
                was committed.
            Exception: the backend's error (sqlite3.Error, psycopg.Error): the transaction
                failed and was rolled back, none of `changes` took effect.
        """

    def close(self) -> None:
        """Wait for the writes under way, then let go of the database."""
