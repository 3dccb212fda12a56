"""The volumes of the SQLite store (sandboxd/store/migrations/0007_volumes.sql;
sandboxd.store.interface's Volumes)."""

from __future__ import annotations

from sandboxd.store.rows import VolumeRow
from sandboxd.store.sqlite.database import Tables

_COLUMNS = "volume_id, name, size_mb, created_at"


class VolumeTables(Tables):
    def add_volume(self, v: VolumeRow) -> None:
        self._db.writes.execute(
            f"INSERT INTO volumes ({_COLUMNS}) VALUES (?, ?, ?, ?)",  # noqa: S608  # ours
            (v.volume_id, v.name, v.size_mb, v.created_at),
        )

    def volume(self, volume_id: str) -> VolumeRow | None:
        return self._one("volume_id", volume_id)

    def volume_named(self, name: str) -> VolumeRow | None:
        return self._one("name", name)

    def volumes(self) -> list[VolumeRow]:
        rows = self._db.reads.execute(
            f"SELECT {_COLUMNS} FROM volumes ORDER BY created_at, volume_id"  # noqa: S608  # ours
        )
        return [VolumeRow(*r) for r in rows]

    def delete_volume(self, volume_id: str) -> None:
        self._db.writes.execute("DELETE FROM volumes WHERE volume_id = ?", (volume_id,))

    def _one(self, column: str, value: str) -> VolumeRow | None:
        row = self._db.reads.execute(
            f"SELECT {_COLUMNS} FROM volumes WHERE {column} = ?",  # noqa: S608  # names are ours
            (value,),
        ).fetchone()
        return None if row is None else VolumeRow(*row)
