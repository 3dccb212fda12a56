-- ../0011_volume_homes.sql: the node agent whose disk holds a volume (NULL: serve's own).
ALTER TABLE volumes ADD COLUMN node_id text
