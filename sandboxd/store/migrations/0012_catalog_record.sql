-- A disk-paused sandbox's record in the cluster's catalog (sandboxd.cluster.moves): its node's
-- SandboxRow as JSON, what another node needs to resume it once its own node is gone; NULL
-- while it runs or is paused in memory. `unmovable`: why a disk-paused one has none (its node
-- shares no registry, it mounts volumes).
ALTER TABLE sandbox_catalog ADD COLUMN record TEXT;
ALTER TABLE sandbox_catalog ADD COLUMN unmovable TEXT
