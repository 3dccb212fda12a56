"""The keys, templates, sandboxes, metric samples and events of the PostgreSQL store
(sandboxd.store.interface's Keys, Templates, Sandboxes and Samples)."""

from __future__ import annotations

import dataclasses

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import KEY_PREFIX_SHOWN, MetricSample, SandboxRow, TemplateRow, key_hash

_JSON_COLUMNS = ("metadata", "env_vars", "options", "disk_image")
_METRIC_COLUMNS = ", ".join(f.name for f in dataclasses.fields(MetricSample))


class SandboxTables(Tables):
    # API keys

    def add_key(self, key: str, now_us: int) -> None:
        self._db.writes.execute(
            "INSERT INTO api_keys VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (key_hash(key), key[:KEY_PREFIX_SHOWN], now_us),
        )

    def has_key(self, key: str) -> bool:
        return bool(self._db.read("SELECT 1 FROM api_keys WHERE key_hash = %s", (key_hash(key),)))

    # Templates

    def put_template(self, t: TemplateRow) -> None:
        self._replace("templates", t, ())

    def count_spawn(self, template_id: str, at_us: int) -> None:
        self._db.writes.execute(
            "UPDATE templates SET spawn_count = spawn_count + 1, last_spawned_at = %s "
            "WHERE template_id = %s",
            (at_us, template_id),
        )

    def template(self, id_or_alias: str) -> TemplateRow | None:
        rows = self._db.read(
            "SELECT * FROM templates WHERE template_id = %s OR alias = %s "
            "ORDER BY template_id = %s DESC LIMIT 1",
            (id_or_alias, id_or_alias, id_or_alias),
        )
        return TemplateRow(**rows[0]) if rows else None

    def templates(self) -> list[TemplateRow]:
        rows = self._db.read("SELECT * FROM templates ORDER BY created_at, template_id")
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

    def add_metric(self, sandbox_id: str, m: MetricSample) -> None:
        self._db.writes.execute(
            "INSERT INTO sandbox_metrics VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (sandbox_id, *dataclasses.astuple(m)),
        )

    def metrics(self, sandbox_id: str, start: int | None, end: int | None) -> list[MetricSample]:
        rows = self._db.read(
            f"SELECT {_METRIC_COLUMNS} FROM sandbox_metrics WHERE sandbox_id = %s "  # noqa: S608  # names are ours
            "AND ts >= %s AND ts <= %s ORDER BY ts",
            (sandbox_id, -1 if start is None else start, 2**62 if end is None else end),
        )
        return [MetricSample(**r) for r in rows]

    def add_team_sample(self, ts: int, running: int) -> None:
        self._db.writes.execute("INSERT INTO team_metrics VALUES (%s, %s)", (ts, running))

    def team_samples(self, start: int, end: int) -> list[tuple[int, int]]:
        rows = self._db.read(
            "SELECT ts, running FROM team_metrics WHERE ts >= %s AND ts <= %s ORDER BY ts",
            (start, end),
        )
        return [(r["ts"], r["running"]) for r in rows]

    def add_event(self, at_us: int, sandbox_id: str | None, kind: str, detail: str = "") -> None:
        self._db.writes.execute(
            "INSERT INTO events (at, sandbox_id, kind, detail) VALUES (%s, %s, %s, %s)",
            (at_us, sandbox_id, kind, detail),
        )

    def event_times(self, kind: str, start_us: int, end_us: int) -> list[int]:
        rows = self._db.read(
            "SELECT at FROM events WHERE kind = %s AND at >= %s AND at <= %s ORDER BY at",
            (kind, start_us, end_us),
        )
        return [r["at"] for r in rows]
