"""The keys, templates, sandboxes, metric samples and events of the PostgreSQL store
(sandboxd.store.interface's Keys, Templates, Sandboxes and Samples)."""

from __future__ import annotations

import dataclasses

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import (
    DEFAULT_TEAM_ID,
    KEY_PREFIX_SHOWN,
    MetricSample,
    SandboxRow,
    TemplateRow,
    key_hash,
)
from sandboxd.store.sql import TEMPLATE_LOOKUP, template_lookup

_JSON_COLUMNS = ("metadata", "env_vars", "options", "disk_image")
_METRIC_COLUMNS = ", ".join(f.name for f in dataclasses.fields(MetricSample))


class SandboxTables(Tables):
    # API keys

    def add_key(self, key: str, now_us: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute(
            "INSERT INTO api_keys VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (key_hash(key), key[:KEY_PREFIX_SHOWN], now_us, team_id),
        )

    def has_key(self, key: str) -> bool:
        return self.team_of_key(key) is not None

    def team_of_key(self, key: str) -> str | None:
        rows = self._db.read("SELECT team_id FROM api_keys WHERE key_hash = %s", (key_hash(key),))
        return str(rows[0]["team_id"]) if rows else None

    # Templates

    def put_template(self, t: TemplateRow) -> None:
        self._replace("templates", t, ())

    def count_spawn(self, template_id: str, at_us: int) -> None:
        self._db.writes.execute(
            "UPDATE templates SET spawn_count = spawn_count + 1, last_spawned_at = %s "
            "WHERE template_id = %s",
            (at_us, template_id),
        )

    def uncount_spawn(self, template_id: str) -> None:
        self._db.writes.execute(
            "UPDATE templates SET spawn_count = spawn_count - 1 "
            "WHERE template_id = %s AND spawn_count > 0",
            (template_id,),
        )

    def template(self, id_or_alias: str, team_id: str = DEFAULT_TEAM_ID) -> TemplateRow | None:
        rows = self._db.read(TEMPLATE_LOOKUP, template_lookup(id_or_alias, team_id))
        return TemplateRow(**rows[0]) if rows else None

    def templates(self, team_id: str | None = None) -> list[TemplateRow]:
        rows = self._db.read(
            "SELECT * FROM templates WHERE %s::text IS NULL OR team_id = %s "
            "ORDER BY created_at, template_id",
            (team_id, team_id),
        )
        return [TemplateRow(**r) for r in rows]

    def delete_template(self, template_id: str) -> None:
        self._db.writes.execute("DELETE FROM templates WHERE template_id = %s", (template_id,))

    # Sandboxes

    def put_sandbox(self, s: SandboxRow) -> None:
        self._replace("sandboxes", s, _JSON_COLUMNS)

    def sandboxes(self) -> list[SandboxRow]:
        rows = self._db.read("SELECT * FROM sandboxes ORDER BY started_at, sandbox_id")
        return [SandboxRow(**r) for r in rows]

    def delete_sandbox(self, sandbox_id: str) -> None:
        self._db.writes.execute("DELETE FROM sandboxes WHERE sandbox_id = %s", (sandbox_id,))

    # Metrics and events

    def add_metric(self, sandbox_id: str, m: MetricSample, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute(
            "INSERT INTO sandbox_metrics VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (sandbox_id, *dataclasses.astuple(m), team_id),
        )

    def metrics(self, sandbox_id: str, start: int | None, end: int | None,
                team_id: str = DEFAULT_TEAM_ID) -> list[MetricSample]:  # fmt: skip
        rows = self._db.read(
            f"SELECT {_METRIC_COLUMNS} FROM sandbox_metrics WHERE sandbox_id = %s "  # noqa: S608  # names are ours
            "AND team_id = %s AND ts >= %s AND ts <= %s ORDER BY ts",
            (sandbox_id, team_id, -1 if start is None else start, 2**62 if end is None else end),
        )
        return [MetricSample(**r) for r in rows]

    def add_team_sample(self, ts: int, running: int, team_id: str = DEFAULT_TEAM_ID) -> None:
        self._db.writes.execute(
            "INSERT INTO team_metrics VALUES (%s, %s, %s)", (ts, running, team_id)
        )

    def team_samples(
        self, start: int, end: int, team_id: str = DEFAULT_TEAM_ID
    ) -> list[tuple[int, int]]:
        rows = self._db.read(
            "SELECT ts, running FROM team_metrics WHERE team_id = %s AND ts >= %s AND ts <= %s "
            "ORDER BY ts",
            (team_id, start, end),
        )
        return [(r["ts"], r["running"]) for r in rows]

    def add_event(self, at_us: int, sandbox_id: str | None, kind: str, detail: str = "",
                  team_id: str | None = None) -> None:  # fmt: skip
        self._db.writes.execute(
            "INSERT INTO events (at, sandbox_id, kind, detail, team_id) "
            "VALUES (%s, %s, %s, %s, %s)",
            (at_us, sandbox_id, kind, detail, team_id),
        )

    def event_times(
        self, kind: str, start_us: int, end_us: int, team_id: str | None = None
    ) -> list[int]:
        rows = self._db.read(
            "SELECT at FROM events WHERE kind = %s AND at >= %s AND at <= %s "
            "AND (%s::text IS NULL OR team_id = %s) ORDER BY at",
            (kind, start_us, end_us, team_id, team_id),
        )
        return [r["at"] for r in rows]
