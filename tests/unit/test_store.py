"""The store's contract (sandboxd.store.interface) as every backend must keep it, on each of
them (SQLite in a state directory, PostgreSQL in a database of Debian's server started for the
run): rows come back as they went in and in the interface's order, `write` commits its changes
together or not at all, a row is replaced only by its key, keys are kept only hashed, writes of
two processes at once all land; a store reopens at the newest schema without losing what it
held; and both backends' migrations make the same tables and columns."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
import pytest

from sandboxd.daemon.serve import open_store
from sandboxd.errors import StoreUnavailable
from sandboxd.store.postgres import database as postgres_database
from sandboxd.store.postgres.store import PostgresStore
from sandboxd.store.rows import (
    DEFAULT_TEAM_ID,
    BuildRow,
    CatalogRow,
    CreateKeyRow,
    LogLine,
    MetricSample,
    SandboxRow,
    SnapshotRow,
    TeamRow,
    TemplateRow,
    VolumeRow,
    key_hash,
)
from sandboxd.store.sqlite import database as sqlite_database
from sandboxd.store.sqlite.store import SqliteStore
from tests.sandboxd.serving import free_port  # nothing listens there
from tests.store.postgres_server import PostgresServer
from tests.store.writer import sandbox
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.store.interface import Store

pytestmark = pytest.mark.anyio

TEMPLATE = TemplateRow("t1", "alias", "b1", "/rootfs", 2, 512, 0, "ready", "0.1", 1, 2)
SANDBOX = SandboxRow("s1", "t1", "alias", "running", 1, 2, 60, False, True, 2, 512, 0, "0.1",
                     metadata={"k": "v"}, options={"network": {"allowOut": ["1.1.1.1"]}},
                     uid_base=65536)  # fmt: skip


@dataclass
class Backend:
    """Where a test's store lives: a state directory, and for PostgreSQL a database URL."""

    state_dir: Path
    url: str | None  # None: SQLite

    def open(self) -> Store:
        return open_store(self.state_dir, self.url)

    def stored_bytes(self) -> bytes:
        """Everything the backend holds, as bytes: SQLite's files, PostgreSQL's tables."""
        if self.url is None:
            return b"".join(p.read_bytes() for p in self.state_dir.iterdir())
        return "".join(_postgres_rows(self.url)).encode()

    def schema_version(self) -> int:
        if self.url is None:
            with contextlib.closing(
                sqlite3.connect(self.state_dir / sqlite_database.DB_FILE)
            ) as db:
                version: int = db.execute("PRAGMA user_version").fetchone()[0]
                return version
        with psycopg.connect(self.url) as db:
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
            assert row is not None
            return int(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend(tmp_path, None)
    return Backend(tmp_path, request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    opened = backend.open()
    yield opened
    opened.close()


def test_both_backends_are_held_to_the_interface(tmp_path: Path, postgres_url: str) -> None:
    for opened in (SqliteStore(tmp_path), PostgresStore(postgres_url)):
        typed: Store = opened  # mypy holds each to the interface here
        typed.close()


async def test_rows_come_back_as_they_went_in(store: Store) -> None:
    build = BuildRow("b1", "t1", "ready", 2, 512, 0, 1, 2, tags=["default"], image=None)
    sample = MetricSample(5, 2, 12.5, 1, 2, 3, 4, 5)
    await store.write(
        functools.partial(store.put_template, TEMPLATE),
        functools.partial(store.put_sandbox, SANDBOX),
        functools.partial(store.put_build, build),
        functools.partial(store.add_log_lines, "b1", [LogLine(0, 1, "info", "hi", "step 1")]),
        functools.partial(store.add_metric, "s1", sample),
        functools.partial(store.count_spawn, "t1", 7),
    )
    assert store.template("alias") == TemplateRow(
        **{**vars(TEMPLATE), "spawn_count": 1, "last_spawned_at": 7}
    )
    assert store.sandboxes() == [SANDBOX]
    assert store.build("b1") == build
    assert store.log_lines("b1", 0, 10) == [LogLine(0, 1, "info", "hi", "step 1")]
    assert store.metrics("s1", None, None) == [sample]


async def test_a_spawn_taken_back_keeps_the_attempts_time_and_never_goes_below_zero(
    store: Store,
) -> None:
    await store.write(functools.partial(store.put_template, TEMPLATE))
    await store.write(functools.partial(store.count_spawn, "t1", 7),
                      functools.partial(store.count_spawn, "t1", 9))  # fmt: skip
    await store.write(functools.partial(store.uncount_spawn, "t1"))
    counted = store.template("t1")
    assert counted is not None
    assert (counted.spawn_count, counted.last_spawned_at) == (1, 9)
    await store.write(functools.partial(store.uncount_spawn, "t1"),
                      functools.partial(store.uncount_spawn, "t1"))  # fmt: skip
    counted = store.template("t1")
    assert counted is not None
    assert counted.spawn_count == 0


async def test_a_sandbox_paused_to_disk_comes_back_with_what_it_boots(store: Store) -> None:
    image = {"layers": ["/l/base", "/l/pause-s2-1"], "init": "systemd", "io_uring": False,
             "limits": {"memory_bytes": 1 << 29, "cpus": 2, "pids": 4096}}  # fmt: skip
    paused = SandboxRow(**{**vars(SANDBOX), "sandbox_id": "s2", "state": "paused",
                           "pause_mode": "filesystem", "disk_image": image})  # fmt: skip
    await store.write(functools.partial(store.put_sandbox, paused))
    assert store.sandboxes() == [paused]


async def test_snapshot_records_go_with_their_template(store: Store) -> None:
    first, second = SnapshotRow("b1", "t1", "s1", 5), SnapshotRow("b2", "t2", "s1", 3)
    await store.write(
        functools.partial(store.put_snapshot, first),
        functools.partial(store.put_snapshot, second),
    )
    assert store.snapshots() == [second, first]  # oldest first
    await store.write(functools.partial(store.delete_snapshots, "t2"))
    assert store.snapshots() == [first]


async def test_lists_come_in_the_interfaces_order_and_pages(store: Store) -> None:
    late, early = (SandboxRow(**{**vars(SANDBOX), "sandbox_id": i, "started_at": t})
                   for i, t in (("a-late", 9), ("z-early", 3)))  # fmt: skip
    builds = [BuildRow(f"b{i}", "t1", s, 2, 512, 0, t, t) for i, s, t in
              ((1, "ready", 5), (2, "error", 4), (3, "ready", 6))]  # fmt: skip
    lines = [LogLine(seq, seq, "info", f"line {seq}") for seq in range(5)]
    await store.write(
        functools.partial(store.put_sandbox, late),
        functools.partial(store.put_sandbox, early),
        *(functools.partial(store.put_build, b) for b in builds),
        functools.partial(store.add_log_lines, "b1", reversed(lines)),
    )
    # A put again keeps the order: oldest first, whatever was written last.
    await store.write(functools.partial(store.put_sandbox, early))
    assert [s.sandbox_id for s in store.sandboxes()] == ["z-early", "a-late"]
    assert [b.build_id for b in store.builds("t1")] == ["b2", "b1", "b3"]
    assert [b.build_id for b in store.builds(status="ready")] == ["b1", "b3"]
    assert store.builds("t2") == []
    assert store.log_lines("b1", 1, 2) == lines[1:3]
    assert store.log_lines("b1", 4, 10) == lines[4:]


async def test_volumes_by_id_and_name_each_name_once(store: Store) -> None:
    first = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0001", "data", 1024, 1)
    second = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0002", "cache", 16, 2, node_id="node-b")
    await store.write(functools.partial(store.add_volume, first),
                      functools.partial(store.add_volume, second))  # fmt: skip
    assert store.volume(first.volume_id) == first
    assert store.volume_named("cache") == second
    assert store.volumes() == [first, second]
    taken = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0003", "data", 16, 3)
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        await store.write(functools.partial(store.add_volume, taken))
    await store.write(functools.partial(store.delete_volume, first.volume_id))
    assert store.volume(first.volume_id) is None
    assert store.volume_named("data") is None
    assert store.volumes() == [second]


TEAM_B = TeamRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c00b0", "team b", "team-b", 5)


async def test_teams_own_keys_templates_volumes_and_their_samples(store: Store) -> None:
    assert [t.team_id for t in store.teams()] == [DEFAULT_TEAM_ID]
    key_a, key_b = "e2b_" + "aa" * 20, "e2b_" + "bb" * 20
    mine = TemplateRow(**{**vars(TEMPLATE), "template_id": "tb", "team_id": TEAM_B.team_id})
    public = TemplateRow(**{**vars(TEMPLATE), "alias": "shared", "public": True})
    await store.write(functools.partial(store.add_team, TEAM_B),
                      functools.partial(store.add_key, key_a, 1),
                      functools.partial(store.add_key, key_b, 1, TEAM_B.team_id),
                      functools.partial(store.put_template, public),
                      functools.partial(store.put_template, mine))  # fmt: skip
    assert store.teams()[1] == TEAM_B
    assert store.team("team b") == TEAM_B == store.team(TEAM_B.team_id)
    assert store.team("nobody") is None
    assert store.team_of_key(key_a) == DEFAULT_TEAM_ID
    assert store.team_of_key(key_b) == TEAM_B.team_id
    assert store.team_of_key("e2b_" + "cc" * 20) is None
    # The same alias in two teams: each finds its own; public ones anyone finds.
    assert store.template("alias", TEAM_B.team_id) == mine
    assert store.template("shared", TEAM_B.team_id) == public
    assert store.template("t1", TEAM_B.team_id) == public  # by id: whoever's
    assert store.templates(TEAM_B.team_id) == [mine]
    assert store.templates() == [public, mine]
    for data in (VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0001", "data", 16, 1),
                 VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0002", "data", 16, 2,
                           TEAM_B.team_id)):  # fmt: skip
        await store.write(functools.partial(store.add_volume, data))
        assert store.volume_named("data", data.team_id) == data
        assert store.volumes(data.team_id) == [data]
    await store.write(functools.partial(store.add_team_sample, 10, 3, TEAM_B.team_id),
                      functools.partial(store.add_team_sample, 10, 1),
                      functools.partial(store.add_event, 7, "s", "created", "", TEAM_B.team_id),
                      functools.partial(store.add_event, 8, "s", "created"))  # fmt: skip
    assert store.team_samples(0, 20, TEAM_B.team_id) == [(10, 3)]
    assert store.team_samples(0, 20) == [(10, 1)]
    assert store.event_times("created", 0, 20, TEAM_B.team_id) == [7]
    assert store.event_times("created", 0, 20) == [7, 8]
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        await store.write(functools.partial(store.add_team, TeamRow("x", "team b", "x", 6)))


async def test_the_catalog_keeps_each_sandbox_once_with_its_node(store: Store) -> None:
    first = CatalogRow("s1", "node-a", "team", 1, {"sandbox_id": "s1", "metadata": {"k": "v"}})
    second = CatalogRow("s2", "node-b", "team", 2)
    await store.write(functools.partial(store.add_catalog_entry, second),
                      functools.partial(store.add_catalog_entry, first))  # fmt: skip
    assert store.catalog() == [first, second]
    assert (store.node_catalog("node-a"), store.node_catalog("node-c")) == ([first], [])
    assert store.catalog_entry("s1") == first
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        await store.write(functools.partial(store.add_catalog_entry, first))
    moved = dataclasses.replace(first, node_id="node-b", record={"sandbox_id": "s1"})
    await store.write(functools.partial(store.update_catalog_entry, moved))
    assert store.catalog() == store.node_catalog("node-b") == [moved, second]
    stuck = dataclasses.replace(moved, record=None, unmovable="it mounts volumes")
    await store.write(functools.partial(store.update_catalog_entry, stuck))
    assert store.catalog_entry("s1") == stuck
    await store.write(functools.partial(store.delete_catalog_entry, "s1"))
    assert store.catalog_entry("s1") is None
    assert store.catalog() == [second]


async def test_a_create_key_is_claimed_once_until_it_expires(store: Store) -> None:
    mine, theirs = (
        CreateKeyRow("api", "k", "c1", None, 10),
        CreateKeyRow("api", "k", "c2", None, 20),
    )
    await store.write(functools.partial(store.claim_create_key, mine, 0))
    await store.write(functools.partial(store.claim_create_key, theirs, 0))
    assert store.create_key("api", "k") == mine
    await store.write(functools.partial(store.settle_create_key, "api", "k", "c2", "sX"))
    await store.write(functools.partial(store.settle_create_key, "api", "k", "c1", "s1"))
    assert store.create_key("api", "k") == CreateKeyRow("api", "k", "c1", "s1", 10)
    await store.write(functools.partial(store.claim_create_key, theirs, 11))  # mine expired
    assert store.create_key("api", "k") == theirs
    await store.write(functools.partial(store.release_create_key, "api", "k", "c1"))
    assert store.create_key("api", "k") == theirs
    await store.write(functools.partial(store.release_create_key, "api", "k", "c2"))
    assert store.create_key("api", "k") is None


async def test_a_lock_is_held_by_one_holder_until_it_runs_out(store: Store) -> None:
    await store.write(functools.partial(store.take_lock, "reap", "a", 0, 100))
    await store.write(functools.partial(store.take_lock, "reap", "b", 50, 150))
    assert store.lock_holder("reap", 50) == "a"
    await store.write(functools.partial(store.take_lock, "reap", "a", 60, 200))  # renewed
    await store.write(functools.partial(store.take_lock, "reap", "b", 150, 250))
    assert store.lock_holder("reap", 150) == "a"
    await store.write(functools.partial(store.take_lock, "reap", "b", 201, 300))
    assert store.lock_holder("reap", 201) == "b"
    assert store.lock_holder("reap", 301) is None


async def test_a_lock_is_released_by_its_holder_and_dropped_once_expired(store: Store) -> None:
    await store.write(functools.partial(store.take_lock, "move-s1", "a", 0, 100))
    await store.write(functools.partial(store.take_lock, "move-s2", "a", 0, 300))
    await store.write(functools.partial(store.release_lock, "move-s1", "b"))
    assert store.lock_holder("move-s1", 50) == "a"
    await store.write(functools.partial(store.release_lock, "move-s1", "a"))
    assert store.lock_holder("move-s1", 50) is None
    await store.write(functools.partial(store.take_lock, "move-s1", "b", 0, 100))
    await store.write(functools.partial(store.drop_expired_locks, 101))
    await store.write(functools.partial(store.take_lock, "move-s1", "c", 0, 50))  # free again
    assert (store.lock_holder("move-s1", 0), store.lock_holder("move-s2", 101)) == ("c", "a")


async def test_a_write_commits_all_its_changes_or_none(store: Store) -> None:
    def fail() -> None:
        raise RuntimeError("a change that fails")

    with pytest.raises(RuntimeError):
        await store.write(functools.partial(store.put_template, TEMPLATE), fail)
    assert store.templates() == []
    await store.write(functools.partial(store.put_template, TEMPLATE))
    assert store.templates() == [TEMPLATE]


async def test_a_row_is_replaced_only_by_its_key(store: Store) -> None:
    renamed = TemplateRow(**{**vars(TEMPLATE), "build_count": 2})
    await store.write(functools.partial(store.put_template, TEMPLATE))
    await store.write(functools.partial(store.put_template, renamed))
    assert store.templates() == [renamed]
    # Another template with its alias is refused; the one holding it stays.
    clash = TemplateRow(**{**vars(TEMPLATE), "template_id": "t2"})
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        await store.write(functools.partial(store.put_template, clash))
    assert store.templates() == [renamed]


async def test_keys_are_kept_only_hashed(store: Store, backend: Backend) -> None:
    key = "e2b_" + "ab" * 20
    await store.write(functools.partial(store.add_key, key, 1))
    await store.write(functools.partial(store.add_key, key, 2))  # a second add: nothing
    assert store.has_key(key)
    assert not store.has_key("e2b_" + "cd" * 20)
    assert key[:10].encode() in backend.stored_bytes()
    assert key.encode() not in backend.stored_bytes()


async def test_a_store_reopens_at_the_newest_schema(backend: Backend) -> None:
    first = backend.open()
    await first.write(functools.partial(first.put_template, TEMPLATE))
    first.close()
    again = backend.open()
    try:
        assert again.templates() == [TEMPLATE]
    finally:
        again.close()
    assert backend.schema_version() == sqlite_database.migrations()[-1][0]


def test_what_was_there_before_teams_is_the_default_teams(backend: Backend) -> None:
    """A store at the schema before teams (0007), with a key, a template and a volume, opened
    now: all three are the default team's."""
    key = "e2b_" + "ef" * 20
    template = ("INSERT INTO templates (template_id, alias, build_id, rootfs, cpu_count, "
                "memory_mb, disk_size_mb, build_status, envd_version, created_at, updated_at) "
                "VALUES ('t1', 'old', 'b1', '/rootfs', 1, 256, 0, 'ready', '0.1', 1, 2)")  # fmt: skip
    rows = ("INSERT INTO api_keys VALUES ('" + key_hash(key) + "', 'e2b_ef', 1)",  # noqa: S608  # ours
            template, "INSERT INTO volumes VALUES ('v1', 'data', 16, 1)")  # fmt: skip
    if backend.url is None:
        with contextlib.closing(sqlite3.connect(backend.state_dir / sqlite_database.DB_FILE)) as db:
            for number, sql in sqlite_database.migrations()[:7]:
                db.executescript(sql + f";\nPRAGMA user_version = {number}")
            db.executescript(";\n".join(rows))
    else:
        with psycopg.connect(backend.url, autocommit=True) as pg:
            pg.execute("CREATE TABLE schema_version (version integer NOT NULL)")
            for number, sql in postgres_database.migrations()[:7]:
                pg.execute(sql.encode())
                pg.execute("INSERT INTO schema_version VALUES (%s)", (number,))
            for row in rows:
                pg.execute(row.encode())
    store = backend.open()
    try:
        assert store.team_of_key(key) == DEFAULT_TEAM_ID
        assert [t.team_id for t in store.templates()] == [DEFAULT_TEAM_ID]
        assert store.template("old") == store.templates()[0]
        assert store.volume_named("data") == store.volumes()[0]
        assert store.volumes()[0].team_id == DEFAULT_TEAM_ID
    finally:
        store.close()
    assert backend.schema_version() == sqlite_database.migrations()[-1][0]


def test_writes_of_two_processes_at_once_all_land(backend: Backend, tmp_path: Path) -> None:
    store = backend.open()
    store.put_template(TEMPLATE)
    gate = tmp_path / "gate"
    gate.mkdir()
    count = 100
    writers = [subprocess.Popen([sys.executable, "-m", "tests.store.writer", str(backend.state_dir),
                                 backend.url or "-", name, str(count), str(gate)])
               for name in ("one", "two")]  # fmt: skip
    try:
        wait_until(lambda: all((gate / n).exists() for n in ("one", "two")), 60, "both ready")
        (gate / "go").touch()
        assert [w.wait(timeout=120) for w in writers] == [0, 0]
        template = store.template("t1")
        assert template is not None
        assert template.spawn_count == 2 * count
        expected = {f"{n}-{i}" for n in ("one", "two") for i in range(count)}
        assert {s.sandbox_id for s in store.sandboxes()} == expected
        assert store.sandboxes()[:2] == [sandbox("one-0", 0), sandbox("two-0", 0)]
    finally:
        for w in writers:
            w.kill()
            w.wait()
        store.close()


def test_both_backends_make_the_same_tables_and_columns(tmp_path: Path, postgres_url: str) -> None:
    """The drift check: the PostgreSQL migrations are the SQLite ones' twins, number for number,
    and make the same tables with the same columns, in the same order, nullable alike, of
    corresponding types."""
    numbers = [n for n, _ in sqlite_database.migrations()]
    assert [n for n, _ in postgres_database.migrations()] == numbers
    SqliteStore(tmp_path).close()
    PostgresStore(postgres_url).close()
    sqlite_columns = _sqlite_columns(tmp_path / sqlite_database.DB_FILE)
    postgres_columns = _postgres_columns(postgres_url)
    assert _shape(postgres_columns) == _shape(sqlite_columns)
    for table, columns in sqlite_columns.items():
        for (name, sqlite_type, _), (_, postgres_type, _) in zip(
            columns, postgres_columns[table], strict=True
        ):
            assert postgres_type in _TWIN_TYPES[sqlite_type], f"{table}.{name}: {postgres_type}"


async def test_an_unreachable_database_is_said_so_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://sandboxd:secret-word@127.0.0.1:{free_port()}/sandboxd"
    with pytest.raises(StoreUnavailable, match="cannot open the database") as raised:
        open_store(tmp_path, url)
    assert "secret-word" not in str(raised.value)


async def test_a_store_whose_server_went_away_says_so_and_connects_again(tmp_path: Path) -> None:
    server = PostgresServer()
    try:
        server.start()
        store = open_store(tmp_path, server.create_database())
        await store.write(functools.partial(store.put_template, TEMPLATE))
        server.halt()
        with pytest.raises(StoreUnavailable, match="the database is unavailable"):
            store.templates()
        with pytest.raises(StoreUnavailable, match="the database is unavailable"):
            await store.write(functools.partial(store.put_sandbox, SANDBOX))
        server.launch()
        assert store.templates() == [TEMPLATE]
        await store.write(functools.partial(store.put_sandbox, SANDBOX))
        assert store.sandboxes() == [SANDBOX]
        store.close()
    finally:
        server.stop()


# A SQLite column's type and the PostgreSQL types that may stand for it.
_TWIN_TYPES = {
    "INTEGER": {"bigint", "boolean"},
    "TEXT": {"text", "jsonb"},
    "REAL": {"double precision"},
}

Columns = dict[str, list[tuple[str, str, bool]]]  # table: [(name, type, nullable)]


def _shape(columns: Columns) -> dict[str, list[tuple[str, bool]]]:
    return {t: [(name, nullable) for name, _, nullable in cs] for t, cs in columns.items()}


def _sqlite_columns(path: Path) -> Columns:
    columns: Columns = {}
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            for _, name, kind, notnull, _, pk in db.execute(f"PRAGMA table_info({t})"):
                columns.setdefault(t, []).append((name, kind, not notnull and not pk))
    return columns


def _postgres_columns(url: str) -> Columns:
    columns: Columns = {}
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT table_name, column_name, data_type, is_nullable = 'YES' "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name <> 'schema_version' ORDER BY table_name, ordinal_position"
        )
        for table, name, data_type, nullable in rows:
            columns.setdefault(table, []).append((name, data_type, nullable))
    return columns


def _postgres_rows(url: str) -> list[str]:
    with psycopg.connect(url) as db:
        tables = [r[0] for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )]  # fmt: skip
        return [str(r[0]) for t in tables for r in db.execute(f"SELECT {t}::text FROM {t}")]  # noqa: S608
