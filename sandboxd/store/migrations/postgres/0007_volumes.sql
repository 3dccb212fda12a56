-- ../0007_volumes.sql: named filesystems that outlive sandboxes, each name once.
CREATE TABLE volumes (
    volume_id  text PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    size_mb    bigint NOT NULL,
    created_at bigint NOT NULL
)
