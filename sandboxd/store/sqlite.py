"""sandboxd's state in SQLite (WAL) in the state directory: API keys (hashed), templates and
their builds (sandboxd.store.build_tables), sandboxes, metric samples and events. Schema changes are the numbered SQL files in
`migrations/`, applied in order and counted in `PRAGMA user_version`.

Two connections. Reads use the one of the thread that opened the store (the event loop's): point
lookups and small scans of pages in memory. Writes use the other, on a thread of their own once
the event loop runs (`write`): a commit's write() can wait milliseconds for the disk, and
checkpoints fsync, which must not stall everything else sandboxd serves. WAL lets the reads go
on meanwhile, and keeps readers in other processes (tests, a second CLI) from blocking.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from sandboxd.store.build_tables import BuildTables

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

DB_FILE = "sandboxd.db"
KEY_PREFIX_SHOWN = 10


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


_JSON_COLUMNS = ("metadata", "env_vars", "options")


def key_hash(key: str) -> str:
    # Keys carry 160 random bits: a plain SHA-256 is enough, no slow hash needed.
    return hashlib.sha256(key.encode()).hexdigest()


def _connect(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")  # WAL's safe setting: durable at checkpoint
    db.execute("PRAGMA busy_timeout = 5000")
    return db


class Store(BuildTables):
    """The database of one state directory.

    The write methods (add_, put_, delete_) run where they are called; once the event loop
    serves, call them only through `write`, which keeps them off the loop and in order.
    """

    def __init__(self, state_dir: Path) -> None:
        """Open (or create) the database and bring its schema up to date.

        Raises:
            sqlite3.Error: the file is not a database, or a migration failed.
        """
        state_dir.mkdir(parents=True, exist_ok=True)
        self.db = _connect(state_dir / DB_FILE)
        migrate(self.db)
        # Used by one thread at a time: the opener's until the loop runs, then the writer's.
        self._writes = _connect(state_dir / DB_FILE, check_same_thread=False)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sandboxd-store")

    def close(self) -> None:
        self._writer.shutdown()
        self._writes.close()
        self.db.close()

    async def write(self, *changes: Callable[[], None]) -> None:
        """Run write methods (`functools.partial(store.add_event, ...)`) on the store's thread
        in one transaction; returns once it is committed (a read after it sees it).

        Raises:
            sqlite3.Error: the transaction failed and was rolled back.
        """
        await asyncio.get_running_loop().run_in_executor(self._writer, self._transaction, changes)

    def _transaction(self, changes: tuple[Callable[[], None], ...]) -> None:
        self._writes.execute("BEGIN IMMEDIATE")
        try:
            for change in changes:
                change()
        except BaseException:
            self._writes.execute("ROLLBACK")
            raise
        self._writes.execute("COMMIT")

    # API keys

    def add_key(self, key: str, now_us: int) -> None:
        self._writes.execute(
            "INSERT OR IGNORE INTO api_keys VALUES (?, ?, ?)",
            (key_hash(key), key[:KEY_PREFIX_SHOWN], now_us),
        )

    def has_key(self, key: str) -> bool:
        row = self.db.execute("SELECT 1 FROM api_keys WHERE key_hash = ?", (key_hash(key),))
        return row.fetchone() is not None

    # Templates

    def put_template(self, t: TemplateRow) -> None:
        values = dataclasses.astuple(t)
        marks = ", ".join("?" * len(values))
        names = ", ".join(f.name for f in dataclasses.fields(t))
        self._writes.execute(f"INSERT OR REPLACE INTO templates ({names}) VALUES ({marks})", values)  # noqa: S608  # column names are ours

    def count_spawn(self, template_id: str, at_us: int) -> None:
        """One more sandbox of the template; nothing when it was deleted meanwhile (a create
        reads the template before its boot and must not write that copy back)."""
        self._writes.execute(
            "UPDATE templates SET spawn_count = spawn_count + 1, last_spawned_at = ? "
            "WHERE template_id = ?",
            (at_us, template_id),
        )

    def template(self, id_or_alias: str) -> TemplateRow | None:
        row = self.db.execute(
            "SELECT * FROM templates WHERE template_id = ? OR alias = ? "
            "ORDER BY template_id = ? DESC LIMIT 1",
            (id_or_alias, id_or_alias, id_or_alias),
        ).fetchone()
        return None if row is None else _template(row)

    def templates(self) -> list[TemplateRow]:
        rows = self.db.execute("SELECT * FROM templates ORDER BY created_at, template_id")
        return [_template(r) for r in rows]

    def delete_template(self, template_id: str) -> None:
        self._writes.execute("DELETE FROM templates WHERE template_id = ?", (template_id,))

    # Sandboxes

    def put_sandbox(self, s: SandboxRow) -> None:
        values = [
            json.dumps(v) if f.name in _JSON_COLUMNS else v
            for f, v in zip(dataclasses.fields(s), dataclasses.astuple(s), strict=True)
        ]
        marks = ", ".join("?" * len(values))
        names = ", ".join(f.name for f in dataclasses.fields(s))
        self._writes.execute(f"INSERT OR REPLACE INTO sandboxes ({names}) VALUES ({marks})", values)  # noqa: S608  # column names are ours

    def sandboxes(self) -> list[SandboxRow]:
        rows = self.db.execute("SELECT * FROM sandboxes")
        return [_sandbox(r) for r in rows]

    def delete_sandbox(self, sandbox_id: str) -> None:
        self._writes.execute("DELETE FROM sandboxes WHERE sandbox_id = ?", (sandbox_id,))

    # Metrics and events

    def add_metric(self, sandbox_id: str, m: MetricSample) -> None:
        self._writes.execute(
            "INSERT INTO sandbox_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sandbox_id, *dataclasses.astuple(m)),
        )

    def metrics(self, sandbox_id: str, start: int | None, end: int | None) -> list[MetricSample]:
        """Samples of one sandbox in [start, end] (Unix seconds; None = unbounded), oldest first."""
        rows = self.db.execute(
            "SELECT ts, cpu_count, cpu_used_pct, mem_used, mem_total, mem_cache, disk_used, "
            "disk_total FROM sandbox_metrics WHERE sandbox_id = ? AND ts >= ? AND ts <= ? "
            "ORDER BY ts",
            (sandbox_id, -1 if start is None else start, 2**62 if end is None else end),
        )
        return [MetricSample(*r) for r in rows]

    def add_team_sample(self, ts: int, running: int) -> None:
        self._writes.execute("INSERT INTO team_metrics VALUES (?, ?)", (ts, running))

    def team_samples(self, start: int, end: int) -> list[tuple[int, int]]:
        rows = self.db.execute(
            "SELECT ts, running FROM team_metrics WHERE ts >= ? AND ts <= ? ORDER BY ts",
            (start, end),
        )
        return [(r[0], r[1]) for r in rows]

    def add_event(self, at_us: int, sandbox_id: str | None, kind: str, detail: str = "") -> None:
        self._writes.execute(
            "INSERT INTO events (at, sandbox_id, kind, detail) VALUES (?, ?, ?, ?)",
            (at_us, sandbox_id, kind, detail),
        )

    def event_times(self, kind: str, start_us: int, end_us: int) -> list[int]:
        rows = self.db.execute(
            "SELECT at FROM events WHERE kind = ? AND at >= ? AND at <= ? ORDER BY at",
            (kind, start_us, end_us),
        )
        return [r[0] for r in rows]


def _template(row: sqlite3.Row) -> TemplateRow:
    values = dict(row)
    values["public"] = bool(values["public"])
    return TemplateRow(**values)


def _sandbox(row: sqlite3.Row) -> SandboxRow:
    values = dict(row)
    for name in _JSON_COLUMNS:
        values[name] = json.loads(values[name])
    values["secure"] = bool(values["secure"])
    values["auto_pause"] = bool(values["auto_pause"])
    return SandboxRow(**values)


def migrations() -> list[tuple[int, str]]:
    """(number, SQL) of every file `NNNN_name.sql` in the migrations package, in order."""
    files = resources.files("sandboxd.store.migrations").iterdir()
    found = [
        (int(f.name.split("_", 1)[0]), f.read_text()) for f in files if f.name.endswith(".sql")
    ]
    return sorted(found)


def migrate(db: sqlite3.Connection) -> None:
    """Apply the migrations newer than the database's `user_version`, each in a transaction
    with its version bump, so a crash leaves the schema at a whole version."""
    current = db.execute("PRAGMA user_version").fetchone()[0]
    for number, sql in migrations():
        if number <= current:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in sql.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {number:d}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
