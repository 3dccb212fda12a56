-- sandboxd's first schema, as ../0001_initial.sql in PostgreSQL's types: times are integer
-- microseconds since the Unix epoch (bigint), flags boolean, JSON fields jsonb.

CREATE TABLE api_keys (
    key_hash   text PRIMARY KEY,
    prefix     text NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE templates (
    template_id     text PRIMARY KEY,
    alias           text UNIQUE,
    build_id        text NOT NULL,
    rootfs          text NOT NULL,
    cpu_count       bigint NOT NULL,
    memory_mb       bigint NOT NULL,
    disk_size_mb    bigint NOT NULL,
    public          boolean NOT NULL DEFAULT false,
    build_status    text NOT NULL,
    envd_version    text NOT NULL,
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL,
    last_spawned_at bigint,
    spawn_count     bigint NOT NULL DEFAULT 0,
    build_count     bigint NOT NULL DEFAULT 1
);

CREATE TABLE sandboxes (
    sandbox_id   text PRIMARY KEY,
    template_id  text NOT NULL,
    alias        text,
    state        text NOT NULL CHECK (state IN ('running', 'paused')),
    started_at   bigint NOT NULL,
    end_at       bigint NOT NULL,
    timeout_s    bigint NOT NULL,
    secure       boolean NOT NULL,
    auto_pause   boolean NOT NULL,
    cpu_count    bigint NOT NULL,
    memory_mb    bigint NOT NULL,
    disk_size_mb bigint NOT NULL,
    envd_version text NOT NULL,
    metadata     jsonb NOT NULL,
    env_vars     jsonb NOT NULL,
    options      jsonb NOT NULL
);
CREATE INDEX sandboxes_by_start ON sandboxes (started_at DESC, sandbox_id);

CREATE TABLE sandbox_metrics (
    sandbox_id   text NOT NULL,
    ts           bigint NOT NULL,
    cpu_count    bigint NOT NULL,
    cpu_used_pct double precision NOT NULL,
    mem_used     bigint NOT NULL,
    mem_total    bigint NOT NULL,
    mem_cache    bigint NOT NULL,
    disk_used    bigint NOT NULL,
    disk_total   bigint NOT NULL
);
CREATE INDEX sandbox_metrics_by_time ON sandbox_metrics (sandbox_id, ts);

CREATE TABLE team_metrics (
    ts      bigint NOT NULL,
    running bigint NOT NULL
);
CREATE INDEX team_metrics_by_time ON team_metrics (ts);

CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         bigint NOT NULL,
    sandbox_id text,
    kind       text NOT NULL,
    detail     text NOT NULL DEFAULT ''
);
CREATE INDEX events_by_kind_time ON events (kind, at);
