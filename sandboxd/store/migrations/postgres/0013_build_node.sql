-- ../0013_build_node.sql: the node agent a cluster's gateway handed a build to.
ALTER TABLE builds ADD COLUMN node_id text
