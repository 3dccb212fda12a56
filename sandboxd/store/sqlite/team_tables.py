"""The teams of the SQLite store (sandboxd/store/migrations/0008_teams.sql;
sandboxd.store.interface's Teams)."""

from __future__ import annotations

from sandboxd.store.rows import TeamRow
from sandboxd.store.sqlite.database import Tables

_COLUMNS = "team_id, name, slug, created_at"


class TeamTables(Tables):
    def add_team(self, t: TeamRow) -> None:
        self._db.writes.execute(
            f"INSERT INTO teams ({_COLUMNS}) VALUES (?, ?, ?, ?)",  # noqa: S608  # ours
            (t.team_id, t.name, t.slug, t.created_at),
        )

    def team(self, id_or_name: str) -> TeamRow | None:
        row = self._db.reads.execute(
            f"SELECT {_COLUMNS} FROM teams WHERE team_id = ? OR name = ? "  # noqa: S608  # ours
            "ORDER BY team_id = ? DESC LIMIT 1",
            (id_or_name, id_or_name, id_or_name),
        ).fetchone()
        return None if row is None else TeamRow(*row)

    def teams(self) -> list[TeamRow]:
        rows = self._db.reads.execute(
            f"SELECT {_COLUMNS} FROM teams ORDER BY created_at, team_id"  # noqa: S608  # ours
        )
        return [TeamRow(*r) for r in rows]
