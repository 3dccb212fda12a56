"""The node agents of the SQLite store (sandboxd/store/migrations/0009_nodes.sql;
sandboxd.store.interface's Nodes). A cluster shares PostgreSQL; SQLite has the table so that
both backends keep one schema and one interface."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sandboxd.store.rows import NodeRow
from sandboxd.store.sql import node_heartbeat
from sandboxd.store.sqlite.database import Tables

if TYPE_CHECKING:
    import sqlite3

_COLUMNS = "node_id, api_url, proxy_address, heartbeat_us, lease_s, draining, status"


class NodeTables(Tables):
    def heartbeat_node(self, n: NodeRow) -> bool:
        cursor = self._db.writes.execute(
            node_heartbeat("?"),
            (n.node_id, n.api_url, n.proxy_address, n.heartbeat_us, n.lease_s,
             json.dumps(n.status), n.draining),
        )  # fmt: skip
        [row] = cursor.fetchall()  # the statement's one row, inserted or updated
        return bool(row["draining"])

    def set_node_draining(self, node_id: str, draining: bool) -> bool:
        # RETURNING rather than rowcount: PostgreSQL's pipelined writes know a row count only
        # once the result is fetched.
        cursor = self._db.writes.execute(
            "UPDATE nodes SET draining = ? WHERE node_id = ? RETURNING node_id", (draining, node_id)
        )
        return cursor.fetchone() is not None

    def nodes(self) -> list[NodeRow]:
        rows = self._db.reads.execute(f"SELECT {_COLUMNS} FROM nodes ORDER BY node_id")  # noqa: S608  # ours
        return [_node(r) for r in rows]

    def node(self, node_id: str) -> NodeRow | None:
        rows = self._db.reads.execute(f"SELECT {_COLUMNS} FROM nodes WHERE node_id = ?", (node_id,))  # noqa: S608  # ours
        return next((_node(r) for r in rows), None)

    def delete_node(self, node_id: str) -> None:
        self._db.writes.execute("DELETE FROM nodes WHERE node_id = ?", (node_id,))


def _node(r: sqlite3.Row) -> NodeRow:
    return NodeRow(
        **{**dict(r), "draining": bool(r["draining"]), "status": json.loads(r["status"])}
    )
