-- Template builds. A build is one run of a template's recipe (the request's base and steps);
-- once `ready`, its image (layers, init, start and ready commands, env, user, workdir) is what
-- sandboxes of it boot. Tags point at builds (`template_tags`); a bare name means its `default`
-- tag. Templates without builds (base, `POST /v2/templates`) boot their `rootfs` by systemd.
-- The template's `build_id` and `build_status` are its latest build's.

CREATE TABLE builds (
    build_id     TEXT PRIMARY KEY,
    template_id  TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
    cpu_count    INTEGER NOT NULL,
    memory_mb    INTEGER NOT NULL,
    disk_size_mb INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    tags         TEXT NOT NULL,      -- JSON list: the tags the build gets once ready
    recipe       TEXT,               -- JSON: the start request's base, steps and commands
    image        TEXT,               -- JSON, once ready
    reason       TEXT                -- JSON {message, step}, once failed
);
CREATE INDEX builds_by_template ON builds (template_id, created_at);

-- Each line a build logged, numbered from 0 per build: the status call's `logsOffset` pages it.
CREATE TABLE build_logs (
    build_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    level    TEXT NOT NULL,
    message  TEXT NOT NULL,
    step     TEXT,
    PRIMARY KEY (build_id, seq)
);

CREATE TABLE template_tags (
    template_id TEXT NOT NULL,
    tag         TEXT NOT NULL,
    build_id    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (template_id, tag)
);
