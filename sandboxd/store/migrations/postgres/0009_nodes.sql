-- ../0009_nodes.sql: the node agents of a cluster, their addresses, leases and status.
CREATE TABLE nodes (
    node_id       text PRIMARY KEY,
    api_url       text NOT NULL,
    proxy_address text NOT NULL,
    heartbeat_us  bigint NOT NULL,
    lease_s       bigint NOT NULL,
    draining      boolean NOT NULL DEFAULT false,
    status        jsonb NOT NULL
)
