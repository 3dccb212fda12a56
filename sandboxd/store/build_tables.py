"""The store's tables of template builds (sandboxd/store/migrations/0003_builds.sql): builds, their
log lines, and template tags. Part of `sandboxd.store.sqlite.Store` (a base class of it): the same two
connections and the same rule, writes only through `Store.write` once the event loop runs."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable


@dataclass
class BuildRow:
    build_id: str
    template_id: str
    status: str  # waiting | building | ready | error
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    created_at: int
    updated_at: int
    finished_at: int | None = None
    tags: list[str] = field(default_factory=list)
    recipe: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    reason: dict[str, Any] | None = None


@dataclass(frozen=True)
class LogLine:
    seq: int
    at: int
    level: str  # debug | info | warn | error
    message: str
    step: str | None = None


@dataclass(frozen=True)
class TagRow:
    tag: str
    build_id: str
    created_at: int


_JSON = ("tags", "recipe", "image", "reason")


class BuildTables:
    db: sqlite3.Connection
    _writes: sqlite3.Connection

    def put_build(self, b: BuildRow) -> None:
        values = [
            json.dumps(v) if f.name in _JSON and v is not None else v
            for f, v in zip(dataclasses.fields(b), dataclasses.astuple(b), strict=True)
        ]
        marks = ", ".join("?" * len(values))
        names = ", ".join(f.name for f in dataclasses.fields(b))
        self._writes.execute(f"INSERT OR REPLACE INTO builds ({names}) VALUES ({marks})", values)  # noqa: S608  # column names are ours

    def build(self, build_id: str) -> BuildRow | None:
        row = self.db.execute("SELECT * FROM builds WHERE build_id = ?", (build_id,)).fetchone()
        return None if row is None else _build(row)

    def builds(self, template_id: str | None = None, status: str | None = None) -> list[BuildRow]:
        """The builds of a template (or all), optionally in one status, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM builds WHERE (?1 IS NULL OR template_id = ?1) "
            "AND (?2 IS NULL OR status = ?2) ORDER BY created_at, build_id",
            (template_id, status),
        )
        return [_build(r) for r in rows]

    def delete_builds(self, template_id: str) -> None:
        """A template's builds, their logs and its tags."""
        self._writes.execute(
            "DELETE FROM build_logs WHERE build_id IN "
            "(SELECT build_id FROM builds WHERE template_id = ?)",
            (template_id,),
        )
        self._writes.execute("DELETE FROM builds WHERE template_id = ?", (template_id,))
        self._writes.execute("DELETE FROM template_tags WHERE template_id = ?", (template_id,))

    def add_log_lines(self, build_id: str, lines: Iterable[LogLine]) -> None:
        self._writes.executemany(
            "INSERT OR REPLACE INTO build_logs VALUES (?, ?, ?, ?, ?, ?)",
            [(build_id, x.seq, x.at, x.level, x.message, x.step) for x in lines],
        )

    def log_lines(self, build_id: str, offset: int, limit: int) -> list[LogLine]:
        rows = self.db.execute(
            "SELECT seq, at, level, message, step FROM build_logs WHERE build_id = ? "
            "AND seq >= ? ORDER BY seq LIMIT ?",
            (build_id, offset, limit),
        )
        return [LogLine(*r) for r in rows]

    def put_tag(self, template_id: str, tag: str, build_id: str, at_us: int) -> None:
        self._writes.execute(
            "INSERT OR REPLACE INTO template_tags VALUES (?, ?, ?, ?)",
            (template_id, tag, build_id, at_us),
        )

    def delete_tag(self, template_id: str, tag: str) -> None:
        self._writes.execute(
            "DELETE FROM template_tags WHERE template_id = ? AND tag = ?", (template_id, tag)
        )

    def tags(self, template_id: str) -> list[TagRow]:
        rows = self.db.execute(
            "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? "
            "ORDER BY created_at, tag",
            (template_id,),
        )
        return [TagRow(*r) for r in rows]

    def tag(self, template_id: str, tag: str) -> TagRow | None:
        row = self.db.execute(
            "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? AND tag = ?",
            (template_id, tag),
        ).fetchone()
        return None if row is None else TagRow(*row)


def _build(row: sqlite3.Row) -> BuildRow:
    values = dict(row)
    for name in _JSON:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return BuildRow(**values)
