"""`PostgresStore`: sandboxd's store (sandboxd.store.interface.Store) in a PostgreSQL database.
Its table groups (.tables, .build_tables, .volume_tables, .team_tables, .node_tables, and .catalog_tables
shared by both) are each whole over a Database (.database); the store is their union over one,
as SqliteStore is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxd.store.catalog_tables import CatalogTables
from sandboxd.store.postgres.build_tables import BuildTables
from sandboxd.store.postgres.database import Database, Tables
from sandboxd.store.postgres.node_tables import NodeTables
from sandboxd.store.postgres.tables import SandboxTables
from sandboxd.store.postgres.team_tables import TeamTables
from sandboxd.store.postgres.volume_tables import VolumeTables

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class PostgresCatalog(Tables, CatalogTables):
    _mark = "%s"

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        return self._db.read(sql, params)

    def _execute(self, sql: str, params: Sequence[object]) -> None:
        self._db.writes.execute(sql, params)


class PostgresStore(
    SandboxTables, TeamTables, BuildTables, VolumeTables, NodeTables, PostgresCatalog
):
    """The database at a `postgresql://` URL. Held to the interface by tests/unit/test_store.py."""

    def __init__(self, url: str) -> None:
        """Connect and bring the schema up to date.

        Raises:
            StoreUnavailable: the server cannot be reached or refused the credentials.
            psycopg.Error: a migration failed.
        """
        super().__init__(Database(url))

    async def write(self, *changes: Callable[[], None]) -> None:
        """Raises StoreUnavailable (the server cannot be reached) or psycopg.Error (the
        transaction failed and was rolled back)."""
        await self._db.write(changes)

    def close(self) -> None:
        self._db.close()
