"""The teams of the PostgreSQL store (sandboxd/store/migrations/postgres/0008_teams.sql;
sandboxd.store.interface's Teams)."""

from __future__ import annotations

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import TeamRow

_COLUMNS = "team_id, name, slug, created_at"


class TeamTables(Tables):
    def add_team(self, t: TeamRow) -> None:
        self._db.writes.execute(
            f"INSERT INTO teams ({_COLUMNS}) VALUES (%s, %s, %s, %s)",  # noqa: S608  # ours
            (t.team_id, t.name, t.slug, t.created_at),
        )

    def team(self, id_or_name: str) -> TeamRow | None:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM teams WHERE team_id = %s OR name = %s "  # noqa: S608  # ours
            "ORDER BY team_id = %s DESC LIMIT 1",
            (id_or_name, id_or_name, id_or_name),
        )
        return TeamRow(**rows[0]) if rows else None

    def teams(self) -> list[TeamRow]:
        rows = self._db.read(
            f"SELECT {_COLUMNS} FROM teams ORDER BY created_at, team_id"  # noqa: S608  # ours
        )
        return [TeamRow(**r) for r in rows]
