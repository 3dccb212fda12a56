"""The volumes of the PostgreSQL store (migrations/postgres/0007_volumes.sql;
sandboxd.store.interface's Volumes)."""

from __future__ import annotations

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import VolumeRow

_COLUMNS = "volume_id, name, size_mb, created_at"


class VolumeTables(Tables):
    def add_volume(self, v: VolumeRow) -> None:
        self._db.writes.execute(
            f"INSERT INTO volumes ({_COLUMNS}) VALUES (%s, %s, %s, %s)",  # noqa: S608  # ours
            (v.volume_id, v.name, v.size_mb, v.created_at),
        )

    def volume(self, volume_id: str) -> VolumeRow | None:
        return self._one("volume_id", volume_id)

    def volume_named(self, name: str) -> VolumeRow | None:
        return self._one("name", name)

    def volumes(self) -> list[VolumeRow]:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM volumes ORDER BY created_at, volume_id"  # noqa: S608  # ours
        )
        return [VolumeRow(**r) for r in rows]

    def delete_volume(self, volume_id: str) -> None:
        self._db.writes.execute("DELETE FROM volumes WHERE volume_id = %s", (volume_id,))

    def _one(self, column: str, value: str) -> VolumeRow | None:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM volumes WHERE {column} = %s",  # noqa: S608  # names are ours
            (value,),
        )
        return VolumeRow(**rows[0]) if rows else None
