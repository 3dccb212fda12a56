"""The node agents of the PostgreSQL store (migrations/postgres/0009_nodes.sql;
sandboxd.store.interface's Nodes): the leases gateways place sandboxes by."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from sandboxd.store.postgres.database import Tables
from sandboxd.store.rows import NodeRow
from sandboxd.store.sql import node_heartbeat

_COLUMNS = "node_id, api_url, proxy_address, heartbeat_us, lease_s, draining, status"


class NodeTables(Tables):
    def heartbeat_node(self, n: NodeRow) -> bool:
        cursor = self._db.writes.execute(
            node_heartbeat("%s"),
            (n.node_id, n.api_url, n.proxy_address, n.heartbeat_us, n.lease_s,
             Jsonb(n.status), n.draining),
        )  # fmt: skip
        [row] = cursor.fetchall()  # the statement's one row, inserted or updated
        return bool(row["draining"])

    def set_node_draining(self, node_id: str, draining: bool) -> bool:
        # RETURNING rather than rowcount: PostgreSQL's pipelined writes know a row count only
        # once the result is fetched.
        cursor = self._db.writes.execute(
            "UPDATE nodes SET draining = %s WHERE node_id = %s RETURNING node_id",
            (draining, node_id),
        )
        return cursor.fetchone() is not None

    def nodes(self) -> list[NodeRow]:
        rows = self._db.read(f"SELECT {_COLUMNS} FROM nodes ORDER BY node_id")  # noqa: S608  # ours
        return [NodeRow(**r) for r in rows]

    def node(self, node_id: str) -> NodeRow | None:
        rows = self._db.read(f"SELECT {_COLUMNS} FROM nodes WHERE node_id = %s", (node_id,))  # noqa: S608  # ours
        return next((NodeRow(**r) for r in rows), None)

    def delete_node(self, node_id: str) -> None:
        self._db.writes.execute("DELETE FROM nodes WHERE node_id = %s", (node_id,))
