"""The keys, templates, sandboxes, metric samples and events of the SQLite store
(sandboxd.store.interface's Keys, Templates, Sandboxes and Samples)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from sandboxd.store.rows import (
    DEFAULT_TEAM_ID,
    KEY_PREFIX_SHOWN,
    MetricSample,
    SandboxRow,
    TemplateRow,
    key_hash,
)
from sandboxd.store.sql import TEMPLATE_LOOKUP, template_lookup
from sandboxd.store.sqlite.database import Tables

if TYPE_CHECKING:
    import sqlite3

_JSON_COLUMNS = ("metadata", "env_vars", "options", "disk_image")


class SandboxTables(Tables):
    # API keys

    def add_key(self, key: str, now_us: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute(
            "INSERT OR IGNORE INTO api_keys VALUES (?, ?, ?, ?)",
            (key_hash(key), key[:KEY_PREFIX_SHOWN], now_us, team_id),
        )

    def has_key(self, key: str) -> bool:
        return self.team_of_key(key) is not None

    def team_of_key(self, key: str) -> str | None:
        row = self._db.reads.execute(
            "SELECT team_id FROM api_keys WHERE key_hash = ?", (key_hash(key),)
        ).fetchone()
        return None if row is None else str(row[0])

    # Templates

    def put_template(self, t: TemplateRow) -> None:
        self._replace("templates", t, ())

    def count_spawn(self, template_id: str, at_us: int) -> None:
        self._db.writes.execute(
            "UPDATE templates SET spawn_count = spawn_count + 1, last_spawned_at = ? "
            "WHERE template_id = ?",
            (at_us, template_id),
        )

    def uncount_spawn(self, template_id: str) -> None:
        self._db.writes.execute(
            "UPDATE templates SET spawn_count = spawn_count - 1 "
            "WHERE template_id = ? AND spawn_count > 0",
            (template_id,),
        )

    def template(self, id_or_alias: str, team_id: str = DEFAULT_TEAM_ID) -> TemplateRow | None:
        row = self._db.reads.execute(TEMPLATE_LOOKUP.replace("%s", "?"),
                                     template_lookup(id_or_alias, team_id)).fetchone()  # fmt: skip
        return None if row is None else _template(row)

    def templates(self, team_id: str | None = None) -> list[TemplateRow]:
        rows = self._db.reads.execute(
            "SELECT * FROM templates WHERE ? IS NULL OR team_id = ? "
            "ORDER BY created_at, template_id",
            (team_id, team_id),
        )
        return [_template(r) for r in rows]

    def delete_template(self, template_id: str) -> None:
        self._db.writes.execute("DELETE FROM templates WHERE template_id = ?", (template_id,))

    # Sandboxes

    def put_sandbox(self, s: SandboxRow) -> None:
        self._replace("sandboxes", s, _JSON_COLUMNS)

    def sandboxes(self) -> list[SandboxRow]:
        rows = self._db.reads.execute("SELECT * FROM sandboxes ORDER BY started_at, sandbox_id")
        return [_sandbox(r) for r in rows]

    def delete_sandbox(self, sandbox_id: str) -> None:
        self._db.writes.execute("DELETE FROM sandboxes WHERE sandbox_id = ?", (sandbox_id,))

    # Metrics and events

    def add_metric(self, sandbox_id: str, m: MetricSample, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute(
            "INSERT INTO sandbox_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sandbox_id, *dataclasses.astuple(m), team_id),
        )

    def metrics(self, sandbox_id: str, start: int | None, end: int | None,
                team_id: str = DEFAULT_TEAM_ID) -> list[MetricSample]:  # fmt: skip
        rows = self._db.reads.execute(
            "SELECT ts, cpu_count, cpu_used_pct, mem_used, mem_total, mem_cache, disk_used, "
            "disk_total FROM sandbox_metrics WHERE sandbox_id = ? AND team_id = ? AND ts >= ? "
            "AND ts <= ? ORDER BY ts",
            (sandbox_id, team_id, -1 if start is None else start, 2**62 if end is None else end),
        )
        return [MetricSample(*r) for r in rows]

    def add_team_sample(self, ts: int, running: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute("INSERT INTO team_metrics VALUES (?, ?, ?)", (ts, running, team_id))

    def team_samples(
        self, start: int, end: int, team_id: str = DEFAULT_TEAM_ID
    ) -> list[tuple[int, int]]:
        rows = self._db.reads.execute(
            "SELECT ts, running FROM team_metrics WHERE team_id = ? AND ts >= ? AND ts <= ? "
            "ORDER BY ts",
            (team_id, start, end),
        )
        return [(r[0], r[1]) for r in rows]

    def add_event(self, at_us: int, sandbox_id: str | None, kind: str, detail: str = "",
                  team_id: str | None = None) -> None:  # fmt: skip
        self._db.writes.execute(
            "INSERT INTO events (at, sandbox_id, kind, detail, team_id) VALUES (?, ?, ?, ?, ?)",
            (at_us, sandbox_id, kind, detail, team_id),
        )

    def event_times(
        self, kind: str, start_us: int, end_us: int, team_id: str | None = None
    ) -> list[int]:
        rows = self._db.reads.execute(
            "SELECT at FROM events WHERE kind = ? AND at >= ? AND at <= ? "
            "AND (? IS NULL OR team_id = ?) ORDER BY at",
            (kind, start_us, end_us, team_id, team_id),
        )
        return [r[0] for r in rows]


def _template(row: sqlite3.Row) -> TemplateRow:
    values = dict(row)
    values["public"] = bool(values["public"])
    return TemplateRow(**values)


def _sandbox(row: sqlite3.Row) -> SandboxRow:
    values = dict(row)
    for name in _JSON_COLUMNS:
        values[name] = None if values[name] is None else json.loads(values[name])
    values["secure"] = bool(values["secure"])
    values["auto_pause"] = bool(values["auto_pause"])
    return SandboxRow(**values)
