"""The cluster's tables (migrations 0010 and 0012; sandboxd.store.interface's Catalog), in SQL both
backends take alike: each backend's table group gives `_mark`, `_rows` and `_execute`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sandboxd.store.rows import CatalogRow, CreateKeyRow

if TYPE_CHECKING:
    from collections.abc import Sequence

_CATALOG = "sandbox_id, node_id, team_id, created_at, info, record, unmovable"
_KEYS = "scope, key, claim, sandbox_id, created_at"


class CatalogTables:
    _mark: str  # the backend's placeholder

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        """The rows of a read, each by column name."""
        raise NotImplementedError

    def _execute(self, sql: str, params: Sequence[object]) -> None:
        """One statement of a write (run in `Store.write`'s transaction)."""
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._mark)

    # The catalog

    def add_catalog_entry(self, e: CatalogRow) -> None:
        self._execute(
            self._sql(f"INSERT INTO sandbox_catalog ({_CATALOG}) VALUES (?, ?, ?, ?, ?, ?, ?)"),  # noqa: S608  # ours
            (e.sandbox_id, e.node_id, e.team_id, e.created_at, *_json(e), e.unmovable),
        )

    def update_catalog_entry(self, e: CatalogRow) -> None:
        self._execute(
            self._sql("UPDATE sandbox_catalog SET node_id = ?, info = ?, record = ?, "
                      "unmovable = ? WHERE sandbox_id = ?"),
            (e.node_id, *_json(e), e.unmovable, e.sandbox_id),
        )  # fmt: skip

    def catalog_entry(self, sandbox_id: str) -> CatalogRow | None:
        rows = self._rows(
            self._sql(f"SELECT {_CATALOG} FROM sandbox_catalog WHERE sandbox_id = ?"),  # noqa: S608  # ours
            (sandbox_id,),
        )
        return _entry(rows[0]) if rows else None

    def catalog(self) -> list[CatalogRow]:
        rows = self._rows(
            f"SELECT {_CATALOG} FROM sandbox_catalog ORDER BY created_at, sandbox_id"  # noqa: S608  # ours
        )
        return [_entry(r) for r in rows]

    def node_catalog(self, node_id: str) -> list[CatalogRow]:
        rows = self._rows(
            self._sql(f"SELECT {_CATALOG} FROM sandbox_catalog WHERE node_id = ? "  # noqa: S608  # ours
                      "ORDER BY created_at, sandbox_id"),
            (node_id,),
        )  # fmt: skip
        return [_entry(r) for r in rows]

    def delete_catalog_entry(self, sandbox_id: str) -> None:
        self._execute(self._sql("DELETE FROM sandbox_catalog WHERE sandbox_id = ?"), (sandbox_id,))

    # Idempotency-Keys

    def claim_create_key(self, k: CreateKeyRow, expired_before_us: int) -> None:
        self._execute(
            self._sql("DELETE FROM create_keys WHERE scope = ? AND key = ? AND created_at < ?"),
            (k.scope, k.key, expired_before_us),
        )
        self._execute(
            self._sql(
                f"INSERT INTO create_keys ({_KEYS}) VALUES (?, ?, ?, ?, ?) "  # noqa: S608  # ours
                "ON CONFLICT (scope, key) DO NOTHING"
            ),
            (k.scope, k.key, k.claim, k.sandbox_id, k.created_at),
        )

    def create_key(self, scope: str, key: str) -> CreateKeyRow | None:
        rows = self._rows(
            self._sql(f"SELECT {_KEYS} FROM create_keys WHERE scope = ? AND key = ?"),  # noqa: S608  # ours
            (scope, key),
        )
        return CreateKeyRow(**rows[0]) if rows else None

    def settle_create_key(self, scope: str, key: str, claim: str, sandbox_id: str) -> None:
        self._execute(
            self._sql(
                "UPDATE create_keys SET sandbox_id = ? WHERE scope = ? AND key = ? AND claim = ?"
            ),
            (sandbox_id, scope, key, claim),
        )

    def release_create_key(self, scope: str, key: str, claim: str) -> None:
        self._execute(
            self._sql("DELETE FROM create_keys WHERE scope = ? AND key = ? AND claim = ?"),
            (scope, key, claim),
        )

    # Duty leases

    def take_lock(self, name: str, holder: str, now_us: int, until_us: int) -> None:
        self._execute(
            self._sql("INSERT INTO cluster_locks (name, holder, until_us) VALUES (?, ?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                      "until_us = excluded.until_us "
                      "WHERE cluster_locks.until_us < ? OR cluster_locks.holder = excluded.holder"),
            (name, holder, until_us, now_us),
        )  # fmt: skip

    def lock_holder(self, name: str, now_us: int) -> str | None:
        rows = self._rows(
            self._sql("SELECT holder FROM cluster_locks WHERE name = ? AND until_us >= ?"),
            (name, now_us),
        )
        return str(rows[0]["holder"]) if rows else None

    def release_lock(self, name: str, holder: str) -> None:
        self._execute(
            self._sql("DELETE FROM cluster_locks WHERE name = ? AND holder = ?"), (name, holder)
        )

    def drop_expired_locks(self, now_us: int) -> None:
        self._execute(self._sql("DELETE FROM cluster_locks WHERE until_us < ?"), (now_us,))


def _json(e: CatalogRow) -> tuple[str, str | None]:
    return json.dumps(e.info), None if e.record is None else json.dumps(e.record)


def _entry(row: dict[str, Any]) -> CatalogRow:
    record = None if row["record"] is None else json.loads(row["record"])
    return CatalogRow(**{**row, "info": json.loads(row["info"]), "record": record})
