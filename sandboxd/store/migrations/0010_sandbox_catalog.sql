-- The cluster's sandbox catalog (sandboxd.cluster): which node runs each sandbox a gateway
-- created, for which team, and the sandbox as its create answered (JSON), shown once its node
-- is gone. Written by gateways only; a lone serve leaves it empty.
CREATE TABLE sandbox_catalog (
    sandbox_id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    team_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    info TEXT NOT NULL
);
CREATE INDEX sandbox_catalog_node ON sandbox_catalog (node_id);
-- Idempotency-Keys of creates, one row per (API key hash, key): the create that inserted it
-- (`claim`) makes the sandbox; the others wait for its sandbox_id.
CREATE TABLE create_keys (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    claim TEXT NOT NULL,
    sandbox_id TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
-- Named leases of cluster-wide duties (the gateways' reconciliation): held by one holder
-- until `until_us`, then free to take.
CREATE TABLE cluster_locks (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until_us INTEGER NOT NULL
)
