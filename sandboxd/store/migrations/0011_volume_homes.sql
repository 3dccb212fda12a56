-- A volume's home: the node agent whose disk holds its filesystem, for the volumes gateways
-- make in a cluster's shared database (sandboxd.cluster.volumes); NULL for serve's own, whose
-- filesystem is on serve's machine.
ALTER TABLE volumes ADD COLUMN node_id TEXT
