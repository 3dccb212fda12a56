"""`SqliteStore`: sandboxd's store (sandboxd.store.interface.Store) in SQLite, in the state
directory. Its table groups (.tables, .build_tables, .volume_tables, .team_tables, .node_tables, and
.catalog_tables shared by both) are each whole over a Database (.database); the store is their union over one, so that its surface is as
flat as the interface's (callers bind its methods: `functools.partial(store.put_build, build)`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxd.store.catalog_tables import CatalogTables
from sandboxd.store.sqlite.build_tables import BuildTables
from sandboxd.store.sqlite.database import Database, Tables
from sandboxd.store.sqlite.node_tables import NodeTables
from sandboxd.store.sqlite.tables import SandboxTables
from sandboxd.store.sqlite.team_tables import TeamTables
from sandboxd.store.sqlite.volume_tables import VolumeTables

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path


class SqliteCatalog(Tables, CatalogTables):
    _mark = "?"

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self._db.reads.execute(sql, params)]

    def _execute(self, sql: str, params: Sequence[object]) -> None:
        self._db.writes.execute(sql, params)


class SqliteStore(SandboxTables, TeamTables, BuildTables, VolumeTables, NodeTables, SqliteCatalog):
    """The database of one state directory. Held to the interface by tests/unit/test_store.py."""

    def __init__(self, state_dir: Path) -> None:
        """Open (or create) the database and bring its schema up to date.

        Raises:
            sqlite3.Error: the file is not a database, or a migration failed.
        """
        super().__init__(Database(state_dir))

    async def write(self, *changes: Callable[[], None]) -> None:
        """Raises sqlite3.Error: the transaction failed and was rolled back."""
        await self._db.write(changes)

    def close(self) -> None:
        self._db.close()
