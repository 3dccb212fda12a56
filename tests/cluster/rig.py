"""The cluster test rig on one machine: Debian's PostgreSQL of its own, Debian's
docker-registry (tests/cluster/registry_server.py) for the layers the nodes share (each started
with `--registry`), node agents (tests/cluster/node_agent.py) and gateways
(tests/cluster/gateway.py), all on loopback and stopped by pid, however the block ends.

`python -m tests.cluster.rig COMMAND...` runs COMMAND against the first gateway, with E2B_API_URL,
E2B_SANDBOX_URL, E2B_API_KEY and a second team's SANDBOXD_OTHER_TEAM_KEY set as
scripts/test-sandboxd-sdk sets them for serve (scripts/test-cluster-sdk: the unmodified SDK
suites through a gateway), and exits with its status, or 1 if a node or gateway logged a
traceback."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from tests.cluster.gateway import DOMAIN, Gateway
from tests.cluster.node_agent import NodeAgent
from tests.cluster.registry_server import registry_server, registry_url
from tests.sandboxd.serving import API_KEY, NO_NETWORK
from tests.sandboxd.template_cache import ensure_base_template
from tests.store.postgres_server import PostgresServer
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator


class Cluster:
    def __init__(self, db: PostgresServer, url: str, nodes: list[NodeAgent],
                 gateways: list[Gateway], registry: str) -> None:  # fmt: skip
        self.db, self.url, self.nodes, self.gateways = db, url, nodes, gateways
        self.registry = registry  # the nodes' --registry

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as db:
            return db.execute(sql.encode(), params).fetchall()

    def placed(self) -> dict[str, str]:
        """sandbox id → node id, as the catalog has them."""
        return dict(self.rows("SELECT sandbox_id, node_id FROM sandbox_catalog"))

    def heartbeat_us(self, node_id: str) -> int:
        """When the node's last heartbeat was written (µs since the epoch; 0: none yet)."""
        rows = self.rows("SELECT heartbeat_us FROM nodes WHERE node_id = %s", node_id)
        return int(rows[0][0]) if rows else 0

    def drain(self, node: NodeAgent, draining: bool) -> None:
        """`sandboxd node drain` (or `undrain`) as an operator runs it, then read back by the
        node's heartbeat (`read_back`)."""
        verb = "drain" if draining else "undrain"
        done = subprocess.run([sys.executable, "-m", "sandboxd", "node", verb, node.node_id,
                               "--database-url", self.url], capture_output=True, text=True,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        self.read_back([node.node_id], time.time_ns() // 1000)

    def set_draining(self, node_ids: Iterable[str], draining: bool) -> None:
        """The operator's flag written in the nodes' rows at once, then read back (`read_back`)."""
        node_ids = list(node_ids)
        for node_id in node_ids:
            self.rows("UPDATE nodes SET draining = %s WHERE node_id = %s RETURNING node_id",
                      draining, node_id)  # fmt: skip
        self.read_back(node_ids, time.time_ns() // 1000)

    def read_back(self, node_ids: Iterable[str], flagged_us: int) -> None:
        """Wait for a heartbeat of each node begun after `flagged_us`, a time after the flag was
        written (a heartbeat begun before may have read the old flag), which reads its drain
        flag back: until then a node refuses a create it should take (a drain just lifted: a
        503 for a create only it could take), or takes one it should refuse."""
        for node_id in node_ids:
            wait_until(functools.partial(self._beat_since, node_id, flagged_us), 60,
                       f"{node_id}'s heartbeat to read its drain flag")  # fmt: skip

    def _beat_since(self, node_id: str, since_us: int) -> bool:
        return self.heartbeat_us(node_id) > since_us

    def on_node(self, node: NodeAgent) -> list[str]:
        """The sandboxes the node's own API lists."""
        answer = node.call_api("list_sandboxes", timeout=30)
        answer.raise_for_status()
        return [s["sandbox_id"] for s in answer.json()]


@contextlib.contextmanager
def running_cluster(work: Path, nodes: int = 2, gateways: int = 2,
                    node_flags: tuple[str, ...] = ()) -> Iterator[Cluster]:  # fmt: skip
    """`node_flags` are added to every node agent's command line."""
    base = ensure_base_template()
    db = PostgresServer()
    token = secrets.token_hex(16)
    with registry_server() as layers:
        registry = registry_url(layers, "cluster/layers")
        with _started(db, base, token, registry, work, nodes, gateways, node_flags) as cluster:
            yield cluster


@contextlib.contextmanager
def _started(db: PostgresServer, base: Path, token: str, registry: str, work: Path, nodes: int,
             gateways: int, node_flags: tuple[str, ...]) -> Iterator[Cluster]:  # fmt: skip
    agents: list[NodeAgent] = []
    fronts: list[Gateway] = []
    try:
        db.start()
        url = db.create_database()
        for i in range(nodes):
            name = f"node-{'abc'[i]}"
            state = work / name
            state.mkdir()
            agents.append(NodeAgent(state, base, url, name, NO_NETWORK, "--domain", DOMAIN,
                                    "--registry", registry, *node_flags, token=token))  # fmt: skip
            agents[-1].start()
        for i in range(gateways):
            fronts.append(Gateway(work / f"gateway-{i}", url, token))
            fronts[-1].start()
        yield Cluster(db, url, agents, fronts, registry)
    finally:
        with contextlib.ExitStack() as stack:  # every piece stopped, whichever fails
            stack.callback(db.stop)
            for agent in agents:
                stack.callback(agent.clean_up)
            for front in fronts:
                stack.callback(front.stop)


def main(argv: list[str], node_flags: tuple[str, ...] = ()) -> int:
    with (
        tempfile.TemporaryDirectory(prefix="sandboxd-rig-") as work,
        running_cluster(Path(work), node_flags=node_flags) as cluster,
    ):
        return run_through(cluster, argv)


def run_through(cluster: Cluster, argv: list[str], **extra_env: str) -> int:
    """Run `argv` against the first gateway with the SDKs' variables (and `extra_env`) set; its
    status, or 1 if a node or gateway logged a traceback."""
    url = cluster.gateways[0].url
    env = {**os.environ, "E2B_API_URL": url, "E2B_SANDBOX_URL": url,
           "E2B_VOLUME_API_URL": url, "E2B_API_KEY": API_KEY,
           "SANDBOXD_OTHER_TEAM_KEY": other_team_key(cluster.url), **extra_env}  # fmt: skip
    env.pop("E2B_DEBUG", None)
    env.pop("E2B_DOMAIN", None)
    status = subprocess.run(argv, env=env, check=False).returncode
    booted = {n.node_id: n.log.read_text().count(" up in ") for n in cluster.nodes}
    sys.stderr.write(f"rig: sandboxes booted per node: {booted}\n")
    for piece in (*cluster.nodes, *cluster.gateways):
        if "Traceback (most recent call last)" in (text := piece.log.read_text()):
            sys.stderr.write(f"rig: {piece.log.name} logged a traceback:\n{text}\n")
            status = status or 1
    return status


def other_team_key(database_url: str) -> str:
    """A key of a second team in the shared database (the SDK teams tests' other tenant), made
    by the operator's commands."""
    sandboxd = [sys.executable, "-m", "sandboxd"]
    subprocess.run([*sandboxd, "team", "create", "sdk other team", "--database-url",
                    database_url], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    made = subprocess.run([*sandboxd, "api-key", "create", "--team", "sdk other team",
                           "--database-url", database_url],
                          check=True, capture_output=True, text=True)  # fmt: skip
    return made.stdout.strip()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
