"""The template builds of the SQLite store (sandboxd/store/migrations/0003_builds.sql): builds,
their log lines, template tags, and which builds are snapshots (0006_snapshots.sql)
(sandboxd.store.interface's Builds)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sandboxd.store.rows import BuildRow, LogLine, SnapshotRow, TagRow
from sandboxd.store.sqlite.database import Tables

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable


_JSON = ("tags", "recipe", "image", "reason")


class BuildTables(Tables):
    def put_build(self, b: BuildRow) -> None:
        self._replace("builds", b, _JSON)

    def build(self, build_id: str) -> BuildRow | None:
        row = self._db.reads.execute(
            "SELECT * FROM builds WHERE build_id = ?", (build_id,)
        ).fetchone()
        return None if row is None else _build(row)

    def builds(self, template_id: str | None = None, status: str | None = None) -> list[BuildRow]:
        rows = self._db.reads.execute(
            "SELECT * FROM builds WHERE (?1 IS NULL OR template_id = ?1) "
            "AND (?2 IS NULL OR status = ?2) ORDER BY created_at, build_id",
            (template_id, status),
        )
        return [_build(r) for r in rows]

    def delete_builds(self, template_id: str) -> None:
        self._db.writes.execute(
            "DELETE FROM build_logs WHERE build_id IN "
            "(SELECT build_id FROM builds WHERE template_id = ?)",
            (template_id,),
        )
        self._db.writes.execute("DELETE FROM builds WHERE template_id = ?", (template_id,))
        self._db.writes.execute("DELETE FROM template_tags WHERE template_id = ?", (template_id,))

    def add_log_lines(self, build_id: str, lines: Iterable[LogLine]) -> None:
        self._db.writes.executemany(
            "INSERT OR REPLACE INTO build_logs VALUES (?, ?, ?, ?, ?, ?)",
            [(build_id, x.seq, x.at, x.level, x.message, x.step) for x in lines],
        )

    def log_lines(self, build_id: str, offset: int, limit: int) -> list[LogLine]:
        rows = self._db.reads.execute(
            "SELECT seq, at, level, message, step FROM build_logs WHERE build_id = ? "
            "AND seq >= ? ORDER BY seq LIMIT ?",
            (build_id, offset, limit),
        )
        return [LogLine(*r) for r in rows]

    def put_tag(self, template_id: str, tag: str, build_id: str, at_us: int) -> None:
        self._db.writes.execute(
            "INSERT OR REPLACE INTO template_tags VALUES (?, ?, ?, ?)",
            (template_id, tag, build_id, at_us),
        )

    def delete_tag(self, template_id: str, tag: str) -> None:
        self._db.writes.execute(
            "DELETE FROM template_tags WHERE template_id = ? AND tag = ?", (template_id, tag)
        )

    def tags(self, template_id: str) -> list[TagRow]:
        rows = self._db.reads.execute(
            "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? "
            "ORDER BY created_at, tag",
            (template_id,),
        )
        return [TagRow(*r) for r in rows]

    def tag(self, template_id: str, tag: str) -> TagRow | None:
        row = self._db.reads.execute(
            "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? AND tag = ?",
            (template_id, tag),
        ).fetchone()
        return None if row is None else TagRow(*row)

    def put_snapshot(self, s: SnapshotRow) -> None:
        self._replace("snapshots", s, ())

    def snapshots(self) -> list[SnapshotRow]:
        rows = self._db.reads.execute(
            "SELECT build_id, template_id, sandbox_id, created_at FROM snapshots "
            "ORDER BY created_at, build_id"
        )
        return [SnapshotRow(*r) for r in rows]

    def delete_snapshots(self, template_id: str) -> None:
        self._db.writes.execute("DELETE FROM snapshots WHERE template_id = ?", (template_id,))


def _build(row: sqlite3.Row) -> BuildRow:
    values = dict(row)
    for name in _JSON:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return BuildRow(**values)
