-- The node agent a cluster's gateway handed a build to (its uploads and its run go there):
-- NULL for a build of a lone serve, which runs every build itself.
ALTER TABLE builds ADD COLUMN node_id TEXT
