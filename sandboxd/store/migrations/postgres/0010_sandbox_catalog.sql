-- ../0010_sandbox_catalog.sql: the cluster's sandbox catalog, Idempotency-Keys, duty leases.
CREATE TABLE sandbox_catalog (
    sandbox_id text PRIMARY KEY,
    node_id    text NOT NULL,
    team_id    text NOT NULL,
    created_at bigint NOT NULL,
    info       text NOT NULL
);
CREATE INDEX sandbox_catalog_node ON sandbox_catalog (node_id);
CREATE TABLE create_keys (
    scope      text NOT NULL,
    key        text NOT NULL,
    claim      text NOT NULL,
    sandbox_id text,
    created_at bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE TABLE cluster_locks (
    name     text PRIMARY KEY,
    holder   text NOT NULL,
    until_us bigint NOT NULL
)
