-- Snapshots: a snapshot is a build of a template (its image: the source sandbox's layers and the
-- layer captured of its files), tagged as any build; this table says which builds are snapshots
-- and of which sandbox, so that `GET /snapshots` lists their templates and filters by source.
CREATE TABLE snapshots (
    build_id    TEXT PRIMARY KEY,
    template_id TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX snapshots_by_template ON snapshots (template_id)
