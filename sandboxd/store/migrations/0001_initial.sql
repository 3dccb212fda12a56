-- sandboxd's first schema. Times are integer microseconds since the Unix epoch, UTC, so they
-- round-trip exactly through the API's RFC 3339 strings, `startedAfter` and list cursors.

CREATE TABLE api_keys (
    key_hash   TEXT PRIMARY KEY,   -- hex SHA-256 of the whole key
    prefix     TEXT NOT NULL,      -- the first characters, for display
    created_at INTEGER NOT NULL
);

CREATE TABLE templates (
    template_id     TEXT PRIMARY KEY,
    alias           TEXT UNIQUE,
    build_id        TEXT NOT NULL,
    rootfs          TEXT NOT NULL,
    cpu_count       INTEGER NOT NULL,
    memory_mb       INTEGER NOT NULL,
    disk_size_mb    INTEGER NOT NULL,
    public          INTEGER NOT NULL DEFAULT 0,
    build_status    TEXT NOT NULL,
    envd_version    TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    last_spawned_at INTEGER,
    spawn_count     INTEGER NOT NULL DEFAULT 0,
    build_count     INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE sandboxes (
    sandbox_id   TEXT PRIMARY KEY,
    template_id  TEXT NOT NULL,
    alias        TEXT,
    state        TEXT NOT NULL CHECK (state IN ('running', 'paused')),
    started_at   INTEGER NOT NULL,
    end_at       INTEGER NOT NULL,
    timeout_s    INTEGER NOT NULL,   -- the create timeout (auto-resume's TTL)
    secure       INTEGER NOT NULL,
    auto_pause   INTEGER NOT NULL,
    cpu_count    INTEGER NOT NULL,
    memory_mb    INTEGER NOT NULL,
    disk_size_mb INTEGER NOT NULL,
    envd_version TEXT NOT NULL,
    metadata     TEXT NOT NULL,      -- JSON object
    env_vars     TEXT NOT NULL,      -- JSON object
    options      TEXT NOT NULL       -- JSON: the validated options not enforced yet
);
CREATE INDEX sandboxes_by_start ON sandboxes (started_at DESC, sandbox_id);

CREATE TABLE sandbox_metrics (
    sandbox_id   TEXT NOT NULL,      -- no foreign key: history outlives the sandbox
    ts           INTEGER NOT NULL,   -- Unix seconds
    cpu_count    INTEGER NOT NULL,
    cpu_used_pct REAL NOT NULL,
    mem_used     INTEGER NOT NULL,
    mem_total    INTEGER NOT NULL,
    mem_cache    INTEGER NOT NULL,
    disk_used    INTEGER NOT NULL,
    disk_total   INTEGER NOT NULL
);
CREATE INDEX sandbox_metrics_by_time ON sandbox_metrics (sandbox_id, ts);

CREATE TABLE team_metrics (
    ts      INTEGER NOT NULL,        -- Unix seconds
    running INTEGER NOT NULL
);
CREATE INDEX team_metrics_by_time ON team_metrics (ts);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    at         INTEGER NOT NULL,
    sandbox_id TEXT,
    kind       TEXT NOT NULL,        -- created, paused, resumed, killed, expired, ...
    detail     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_by_kind_time ON events (kind, at);
