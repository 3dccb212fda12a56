-- Volumes: named filesystems that outlive sandboxes (sandboxd.volumes). Each is an image file
-- of `size_mb` in the state directory's volumes/; its name is unique among them.
CREATE TABLE volumes (
    volume_id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    size_mb INTEGER NOT NULL,
    created_at INTEGER NOT NULL
)
