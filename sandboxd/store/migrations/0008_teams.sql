-- Teams: every API key belongs to one, and so does every sandbox, template (its builds, tags
-- and snapshots with it) and volume; a key sees only its team's. The default team below is a
-- single user's: every key and row from before teams is its. Template aliases and volume names
-- are unique per team (E2B's namespaces), so both tables are made again with that constraint
-- in place of their global one; `team_id` comes last, as ALTER TABLE adds it in PostgreSQL.
CREATE TABLE teams (
    team_id    TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    slug       TEXT NOT NULL UNIQUE,   -- the namespace of its template names
    created_at INTEGER NOT NULL
);
INSERT INTO teams VALUES ('00000000-0000-4000-8000-000000000001', 'sandboxd', 'sandboxd', 0);

ALTER TABLE api_keys ADD COLUMN team_id TEXT NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE sandboxes ADD COLUMN team_id TEXT NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE sandbox_metrics ADD COLUMN team_id TEXT NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE team_metrics ADD COLUMN team_id TEXT NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
-- NULL: an event of no team's.
ALTER TABLE events ADD COLUMN team_id TEXT;

CREATE TABLE templates_by_team (
    template_id     TEXT PRIMARY KEY,
    alias           TEXT,
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
    build_count     INTEGER NOT NULL DEFAULT 1,
    team_id         TEXT NOT NULL DEFAULT '00000000-0000-4000-8000-000000000001',
    UNIQUE (team_id, alias)
);
INSERT INTO templates_by_team
    SELECT *, '00000000-0000-4000-8000-000000000001' FROM templates;
DROP TABLE templates;
ALTER TABLE templates_by_team RENAME TO templates;

CREATE TABLE volumes_by_team (
    volume_id  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    size_mb    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    team_id    TEXT NOT NULL DEFAULT '00000000-0000-4000-8000-000000000001',
    UNIQUE (team_id, name)
);
INSERT INTO volumes_by_team SELECT *, '00000000-0000-4000-8000-000000000001' FROM volumes;
DROP TABLE volumes;
ALTER TABLE volumes_by_team RENAME TO volumes
