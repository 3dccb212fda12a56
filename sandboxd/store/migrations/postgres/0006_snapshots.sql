-- ../0006_snapshots.sql: which builds are snapshots, and of which sandbox.
CREATE TABLE snapshots (
    build_id    text PRIMARY KEY,
    template_id text NOT NULL,
    sandbox_id  text NOT NULL,
    created_at  bigint NOT NULL
);
CREATE INDEX snapshots_by_template ON snapshots (template_id)
