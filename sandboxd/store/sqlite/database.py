"""The SQLite (WAL) database of a state directory: its connections, its schema (the numbered
SQL files of sandboxd/store/migrations, applied in order and counted in `PRAGMA user_version`)
and its writer.

Two connections. Reads use the one of the thread that opened the database (the event loop's):
point lookups and small scans of pages in memory. Writes use the other, on a thread of their own
once the event loop runs (`write`): a commit's write() can wait milliseconds for the disk, and
checkpoints fsync, which must not stall everything else sandboxd serves. WAL lets the reads go
on meanwhile, and keeps readers in other processes (tests, a second CLI) from blocking.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import TYPE_CHECKING

from sandboxd.store.sql import row_upsert

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from _typeshed import DataclassInstance

DB_FILE = "sandboxd.db"


class Database:
    """`reads`: the opener's connection. `writes`: the writer's, used by one thread at a time:
    the opener's until the loop runs, then the writer's (`write`)."""

    def __init__(self, state_dir: Path) -> None:
        """Open (or create) the database and bring its schema up to date.

        Raises:
            sqlite3.Error: the file is not a database, or a migration failed.
        """
        state_dir.mkdir(parents=True, exist_ok=True)
        self.reads = _connect(state_dir / DB_FILE)
        migrate(self.reads)
        self.writes = _connect(state_dir / DB_FILE, check_same_thread=False)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sandboxd-store")

    def close(self) -> None:
        self._writer.shutdown()
        self.writes.close()
        self.reads.close()

    async def write(self, changes: tuple[Callable[[], None], ...]) -> None:
        """Run `changes` on the writer's thread in one transaction; returns once committed.

        Raises:
            sqlite3.Error: the transaction failed and was rolled back.
        """
        await asyncio.get_running_loop().run_in_executor(self._writer, self._transaction, changes)

    def _transaction(self, changes: tuple[Callable[[], None], ...]) -> None:
        self.writes.execute("BEGIN IMMEDIATE")
        try:
            for change in changes:
                change()
        except BaseException:
            self.writes.execute("ROLLBACK")
            raise
        self.writes.execute("COMMIT")


class Tables:
    """A group of tables of one Database (sandboxd.store.sqlite.tables, .build_tables): reads
    on `reads`, writes on `writes`, which `SqliteStore.write` runs in its transactions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _replace(self, table: str, row: DataclassInstance, json_fields: tuple[str, ...]) -> None:
        """Write `row` (its fields the columns) into `table`, over the row of the same key
        (sandboxd.store.sql.upsert); the fields named in `json_fields` as JSON, None as NULL."""
        self._db.writes.execute(*row_upsert(table, row, json_fields, json.dumps, "?"))


def _connect(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")  # WAL's safe setting: durable at checkpoint
    db.execute("PRAGMA busy_timeout = 5000")
    return db


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
