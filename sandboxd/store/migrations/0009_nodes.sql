-- The node agents of a cluster (sandboxd node), each writing its row every heartbeat: where
-- gateways reach it, until when its lease holds (heartbeat_us + lease_s seconds), whether it is
-- draining (set by an operator, never by a heartbeat) and its status (JSON: capacity, use, warm
-- sandboxes per template, the templates it holds). Only a shared database has rows here.
CREATE TABLE nodes (
    node_id TEXT PRIMARY KEY,
    api_url TEXT NOT NULL,
    proxy_address TEXT NOT NULL,
    heartbeat_us INTEGER NOT NULL,
    lease_s INTEGER NOT NULL,
    draining INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL
)
