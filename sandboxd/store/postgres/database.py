"""A PostgreSQL database: its connections, its schema (the numbered SQL files of
sandboxd/store/migrations/postgres, the twins of the SQLite ones, counted in the table
`schema_version`) and its writer.

The same shape as the SQLite backend's (sandboxd.store.sqlite.database), so that callers keep
one contract. Two connections, both in autocommit: reads on the opener's thread (the event
loop's), each its own statement and so the latest committed state; writes on a thread of their
own once the event loop runs (`write`), each `write` one transaction. A read is a round trip to
the server while the event loop waits: on loopback or a LAN a fraction of a millisecond
(bench/store_backends.py measures it). A connection the server dropped (a restart, a failover)
is opened again by the next read or write; the one under way fails with StoreUnavailable. One
dropped while idle is seen before it is used (it turned readable), so that the first read or
write after a server came back does not fail on it.
"""

from __future__ import annotations

import asyncio
import select
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from sandboxd.errors import StoreUnavailable
from sandboxd.store.sql import row_upsert

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from _typeshed import DataclassInstance

# The advisory lock that serialises migrations of sandboxds starting together on one database.
_MIGRATION_LOCK = 0x5A4D_0001
_CONNECT_TIMEOUT_S = 10

Row = dict[str, Any]


class Database:
    """`reads`: the opener's connection. `writes`: the writer's, used by one thread at a time:
    the opener's until the loop runs, then the writer's (`write`)."""

    def __init__(self, url: str) -> None:
        """Connect and bring the schema up to date.

        Raises:
            StoreUnavailable: the server cannot be reached or refused the credentials.
            psycopg.Error: a migration failed.
        """
        self._url = url
        self._reads = _connect(url)
        migrate(self._reads)
        self.writes = _connect(url)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sandboxd-store")

    def close(self) -> None:
        self._writer.shutdown()
        self.writes.close()
        self._reads.close()

    def read(self, sql: str, params: Iterable[object] = ()) -> list[Row]:
        """The rows of one query.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        try:
            self._reads = self._reopened(self._reads)
            return self._reads.execute(sql, tuple(params)).fetchall()
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"the database is unavailable: {exc}") from exc

    async def write(self, changes: tuple[Callable[[], None], ...]) -> None:
        """Run `changes` on the writer's thread in one transaction; returns once committed.

        Raises:
            StoreUnavailable: the server cannot be reached; nothing was committed.
            psycopg.Error: the transaction failed and was rolled back.
        """
        await asyncio.get_running_loop().run_in_executor(self._writer, self._transaction, changes)

    def _reopened(self, db: psycopg.Connection[Row]) -> psycopg.Connection[Row]:
        """`db`, or a new connection if it can no longer be used.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        if _usable(db):
            return db
        db.close()
        try:
            return _connect(self._url)
        except StoreUnavailable as exc:
            raise StoreUnavailable(f"the database is unavailable: {exc}") from exc

    def _transaction(self, changes: tuple[Callable[[], None], ...]) -> None:
        try:
            self.writes = self._reopened(self.writes)
            # Pipelined: the transaction's statements go out without waiting for each answer,
            # so a write is about one round trip however many changes it holds, and this
            # thread waits for the GIL once rather than after each statement.
            with self.writes.pipeline(), self.writes.transaction():
                for change in changes:
                    change()
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"the database is unavailable: {exc}") from exc


class Tables:
    """A group of tables of one Database (sandboxd.store.postgres.tables, .build_tables): reads
    through `read`, writes on `writes`, which `PostgresStore.write` runs in its transactions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _replace(self, table: str, row: DataclassInstance, json_fields: tuple[str, ...]) -> None:
        """Write `row` (its fields the columns) into `table`, over the row of the same key
        (sandboxd.store.sql.upsert); the fields named in `json_fields` as jsonb, None as NULL."""
        self._db.writes.execute(*row_upsert(table, row, json_fields, Jsonb, "%s"))


def shown(url: str) -> str:
    """`url` without its password, to name the database in messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _usable(db: psycopg.Connection[Row]) -> bool:
    """Whether an idle connection can take a statement: not broken, and not dropped by the
    server meanwhile (a restart, an idle timeout), which left it readable, its last words or
    its end waiting, so that the statement would fail on it."""
    if db.broken or db.closed:
        return False
    readable, _, _ = select.select([db.fileno()], [], [], 0)
    return not readable


def _connect(url: str) -> psycopg.Connection[Row]:
    try:
        return psycopg.connect(
            url, autocommit=True, row_factory=dict_row, connect_timeout=_CONNECT_TIMEOUT_S
        )
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(f"cannot open the database {shown(url)}: {exc}") from exc


def migrations() -> list[tuple[int, str]]:
    """(number, SQL) of every file `NNNN_name.sql` in the PostgreSQL migrations, in order."""
    files = resources.files("sandboxd.store.migrations.postgres").iterdir()
    found = [
        (int(f.name.split("_", 1)[0]), f.read_text()) for f in files if f.name.endswith(".sql")
    ]
    return sorted(found)


def migrate(db: psycopg.Connection[Row]) -> None:
    """Apply the migrations newer than the database's `schema_version` in one transaction with
    its bump, under an advisory lock: sandboxds starting together on one database apply each
    once, and a crash leaves the schema at a whole version."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        row = db.execute("SELECT max(version) AS version FROM schema_version").fetchone()
        current = 0 if row is None or row["version"] is None else row["version"]
        for number, sql in migrations():
            if number > current:
                db.execute(sql.encode())  # no parameters: several statements in one
                db.execute("INSERT INTO schema_version VALUES (%s)", (number,))
