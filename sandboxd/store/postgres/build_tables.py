"""The template builds of the PostgreSQL store (migrations/postgres/0003_builds.sql): builds,
their log lines, and template tags (sandboxd.store.interface's Builds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import BuildRow, LogLine, TagRow

if TYPE_CHECKING:
    from collections.abc import Iterable

_JSON = ("tags", "recipe", "image", "reason")


class BuildTables(Tables):
    def put_build(self, b: BuildRow) -> None:
        self._replace("builds", b, _JSON)

    def build(self, build_id: str) -> BuildRow | None:
        rows = self._db.read("SELECT * FROM builds WHERE build_id = %s", (build_id,))
        return BuildRow(**rows[0]) if rows else None

    def builds(self, template_id: str | None = None, status: str | None = None) -> list[BuildRow]:
        # Only the conditions given: PostgreSQL cannot type a parameter compared with NULL only.
        given = [
            (c, v) for c, v in (("template_id", template_id), ("status", status)) if v is not None
        ]
        where = " AND ".join(f"{c} = %s" for c, _ in given) or "true"
        rows = self._db.read(
            f"SELECT * FROM builds WHERE {where} ORDER BY created_at, build_id",  # noqa: S608  # names are ours
            [v for _, v in given],
        )
        return [BuildRow(**r) for r in rows]

    def delete_builds(self, template_id: str) -> None:
        self._db.writes.execute(
            "DELETE FROM build_logs WHERE build_id IN "
            "(SELECT build_id FROM builds WHERE template_id = %s)",
            (template_id,),
        )
        self._db.writes.execute("DELETE FROM builds WHERE template_id = %s", (template_id,))
        self._db.writes.execute("DELETE FROM template_tags WHERE template_id = %s", (template_id,))

    def add_log_lines(self, build_id: str, lines: Iterable[LogLine]) -> None:
        with self._db.writes.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO build_logs VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (build_id, seq) DO UPDATE SET at = excluded.at, "
                "level = excluded.level, message = excluded.message, step = excluded.step",
                [(build_id, x.seq, x.at, x.level, x.message, x.step) for x in lines],
            )

    def log_lines(self, build_id: str, offset: int, limit: int) -> list[LogLine]:
        rows = self._db.read(
            "SELECT seq, at, level, message, step FROM build_logs WHERE build_id = %s "
            "AND seq >= %s ORDER BY seq LIMIT %s",
            (build_id, offset, limit),
        )
        return [LogLine(**r) for r in rows]

    def put_tag(self, template_id: str, tag: str, build_id: str, at_us: int) -> None:
        self._db.writes.execute(
            "INSERT INTO template_tags VALUES (%s, %s, %s, %s) ON CONFLICT (template_id, tag) "
            "DO UPDATE SET build_id = excluded.build_id, created_at = excluded.created_at",
            (template_id, tag, build_id, at_us),
        )

    def delete_tag(self, template_id: str, tag: str) -> None:
        self._db.writes.execute(
            "DELETE FROM template_tags WHERE template_id = %s AND tag = %s", (template_id, tag)
        )

    def tags(self, template_id: str) -> list[TagRow]:
        rows = self._db.read(
            "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = %s "
            "ORDER BY created_at, tag",
            (template_id,),
        )
        return [TagRow(**r) for r in rows]

    def tag(self, template_id: str, tag: str) -> TagRow | None:
        rows = self._db.read(
            "SELECT tag, build_id, created_at FROM template_tags "
            "WHERE template_id = %s AND tag = %s",
            (template_id, tag),
        )
        return TagRow(**rows[0]) if rows else None
