-- A disk-paused sandbox's record in the cluster's catalog (sandboxd.cluster.moves): its node's
-- SandboxRow as JSON, what another node needs to resume it once its own node is gone; NULL
-- while it runs, is paused in memory, or its node shares no registry.
ALTER TABLE sandbox_catalog ADD COLUMN record TEXT
