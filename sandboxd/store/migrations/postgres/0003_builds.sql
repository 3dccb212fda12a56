-- ../0003_builds.sql: template builds, their log lines, template tags.

CREATE TABLE builds (
    build_id     text PRIMARY KEY,
    template_id  text NOT NULL,
    status       text NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
    cpu_count    bigint NOT NULL,
    memory_mb    bigint NOT NULL,
    disk_size_mb bigint NOT NULL,
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL,
    finished_at  bigint,
    tags         jsonb NOT NULL,
    recipe       jsonb,
    image        jsonb,
    reason       jsonb
);
CREATE INDEX builds_by_template ON builds (template_id, created_at);

CREATE TABLE build_logs (
    build_id text NOT NULL,
    seq      bigint NOT NULL,
    at       bigint NOT NULL,
    level    text NOT NULL,
    message  text NOT NULL,
    step     text,
    PRIMARY KEY (build_id, seq)
);

CREATE TABLE template_tags (
    template_id text NOT NULL,
    tag         text NOT NULL,
    build_id    text NOT NULL,
    created_at  bigint NOT NULL,
    PRIMARY KEY (template_id, tag)
);
