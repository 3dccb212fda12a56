"""The volumes of the PostgreSQL store (migrations/postgres/0007_volumes.sql, 0008_teams.sql,
0011_volume_homes.sql; sandboxd.store.interface's Volumes)."""

from __future__ import annotations

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import DEFAULT_TEAM_ID, VolumeRow

_COLUMNS = "volume_id, name, size_mb, created_at, team_id, node_id"


class VolumeTables(Tables):
    def add_volume(self, v: VolumeRow) -> None:
        self._db.writes.execute(
            f"INSERT INTO volumes ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)",  # noqa: S608  # ours
            (v.volume_id, v.name, v.size_mb, v.created_at, v.team_id, v.node_id),
        )

    def volume(self, volume_id: str) -> VolumeRow | None:
        return self._one("volume_id = %s", volume_id)

    def volume_named(self, name: str, team_id: str = DEFAULT_TEAM_ID) -> VolumeRow | None:
        return self._one("name = %s AND team_id = %s", name, team_id)

    def volumes(self, team_id: str | None = None) -> list[VolumeRow]:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM volumes WHERE %s::text IS NULL OR team_id = %s "  # noqa: S608
            "ORDER BY created_at, volume_id",
            (team_id, team_id),
        )
        return [VolumeRow(**r) for r in rows]

    def delete_volume(self, volume_id: str) -> None:
        self._db.writes.execute("DELETE FROM volumes WHERE volume_id = %s", (volume_id,))

    def _one(self, where: str, *values: str) -> VolumeRow | None:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM volumes WHERE {where}",  # noqa: S608  # ours
            values,
        )
        return VolumeRow(**rows[0]) if rows else None
