"""A node agent in the cluster's shared database: its heartbeat row appears and advances with
its status, and fails without harm while the database is down, `sandboxd node drain` makes it
refuse creates (NodeDraining on the gateway's side) while its sandboxes run on, `undrain` lets
it take them again; an operator's drain holds across the agent's restarts, while the agent's
own at a stop (`stopping` in its status) ends at its next start; and two agents run side by side
on one host, each with its own state directory, cgroup parent and sandboxes, while a second
agent on a state directory or cgroup parent already held refuses to start."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import NodeDraining
from sandboxd.node.heartbeat import max_sandboxes
from sandboxd.node.models import SandboxConfig
from sandboxd.node.remote import RemoteNode
from sandboxd.store.postgres.store import PostgresStore
from tests.cluster.node_agent import NodeAgent, running_node
from tests.sandboxd.serving import NO_NETWORK
from tests.store.postgres_server import PostgresServer
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.store.rows import NodeRow

# A node agent starts, boots and stops sandboxes per test: minutes on a loaded machine.
pytestmark = [pytest.mark.root, pytest.mark.anyio, pytest.mark.timeout(600)]

CONFIG = SandboxConfig("base", 300, secure=False, auto_pause=False)


def _row(url: str, node_id: str) -> NodeRow | None:
    shared = PostgresStore(url)
    try:
        return next((n for n in shared.nodes() if n.node_id == node_id), None)
    finally:
        shared.close()


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandboxd", *argv], capture_output=True,
                          text=True, check=False)  # fmt: skip


@pytest.fixture
def beating(
    tmp_path: Path, base_template: Path, postgres_server: PostgresServer
) -> Iterator[NodeAgent]:
    """A node agent beating five times a second, one warm sandbox per template."""
    url = postgres_server.create_database()
    with running_node(tmp_path / "state", base_template, url, "beating",
                      "--heartbeat-s", "0.2", "--pool", "1") as node:  # fmt: skip
        yield node


@pytest.fixture
def pair(
    tmp_path: Path, base_template: Path, postgres_server: PostgresServer
) -> Iterator[tuple[NodeAgent, NodeAgent]]:
    """Two node agents on this host, on one shared database."""
    url = postgres_server.create_database()
    with running_node(tmp_path / "a", base_template, url, "a") as a, \
         running_node(tmp_path / "b", base_template, url, "b") as b:  # fmt: skip
        yield a, b


async def test_heartbeats_advance_and_a_drained_node_refuses_creates(beating: NodeAgent) -> None:
    node, url = beating, beating.database_url
    first = wait_until(lambda: _row(url, "beating"), 30, "the node's row")
    assert (first.api_url, first.proxy_address) == (node.url, f"127.0.0.1:{node.proxy_port}")
    assert (first.lease_s, first.draining) == (10, False)
    assert first.status["cpus"] >= 1
    assert first.status["max_sandboxes"] == max_sandboxes(None)  # no network pool
    assert "base" in first.status["templates"]
    wait_until(lambda: (_row(url, "beating") or first).status["warm"] == {"base": 1}, 120,
               "the warm sandbox in the status")  # fmt: skip
    _after_two_heartbeats(url, "beating")
    later = _row(url, "beating")
    assert later is not None
    assert later.heartbeat_us > first.heartbeat_us
    remote = RemoteNode(node.node_id, node.url, node.token)
    try:
        running = await remote.create(CONFIG)
        wait_until(lambda: (_row(url, "beating") or first).status["sandboxes"] >= 1, 30,
                   "the sandbox counted")  # fmt: skip
        drained = _cli("node", "drain", "beating", "--database-url", url)
        assert drained.returncode == 0, drained.stderr
        assert (_row(url, "beating") or first).draining
        _after_two_heartbeats(url, "beating")
        with pytest.raises(NodeDraining, match="draining"):
            await remote.create(CONFIG)
        assert (await remote.get(running.sandbox_id)) is not None  # runs on
        undrained = _cli("node", "undrain", "beating", "--database-url", url)
        assert undrained.returncode == 0, undrained.stderr
        _after_two_heartbeats(url, "beating")
        await remote.kill((await remote.create(CONFIG)).sandbox_id)
        await remote.kill(running.sandbox_id)
    finally:
        await remote.close()
    missing = _cli("node", "drain", "nosuchnode", "--database-url", url)
    assert missing.returncode == 2
    assert "no node nosuchnode" in missing.stderr


async def test_an_operators_drain_outlives_a_restart_and_a_stops_own_does_not(
    beating: NodeAgent,
) -> None:
    node, url = beating, beating.database_url
    assert not wait_until(lambda: _row(url, "beating"), 30, "the node's row").status["stopping"]
    node.stop()  # SIGTERM: its last heartbeat says it stops, with no operator's drain
    stopped = _row(url, "beating")
    assert stopped is not None
    assert (stopped.status["stopping"], stopped.draining) == (True, False)
    node.start()  # its first heartbeat comes before it serves
    started = _row(url, "beating")
    assert started is not None
    assert (started.status["stopping"], started.draining) == (False, False)
    drained = _cli("node", "drain", "beating", "--database-url", url)
    assert drained.returncode == 0, drained.stderr
    node.stop()
    node.start()
    restarted = _row(url, "beating")
    assert restarted is not None
    assert (restarted.status["stopping"], restarted.draining) == (False, True)
    remote = RemoteNode(node.node_id, node.url, node.token)
    try:
        with pytest.raises(NodeDraining, match="draining"):
            await remote.create(CONFIG)
        undrained = _cli("node", "undrain", "beating", "--database-url", url)
        assert undrained.returncode == 0, undrained.stderr
        _after_two_heartbeats(url, "beating")
        await remote.kill((await remote.create(CONFIG)).sandbox_id)
    finally:
        await remote.close()


def _after_two_heartbeats(url: str, node_id: str) -> None:
    """Until the node has read its row back after now: a heartbeat reads it right after writing
    it, so the second heartbeat written from now on comes after a read that saw now's row."""
    row = _row(url, node_id)
    assert row is not None
    seen = row.heartbeat_us
    for _ in range(2):
        seen = wait_until(functools.partial(_heartbeat_after, url, node_id, seen), 30,
                          "a heartbeat")  # fmt: skip


def _heartbeat_after(url: str, node_id: str, after_us: int) -> int | None:
    row = _row(url, node_id)
    return row.heartbeat_us if row is not None and row.heartbeat_us > after_us else None


async def test_two_agents_side_by_side(pair: tuple[NodeAgent, NodeAgent], tmp_path: Path,
                                       base_template: Path) -> None:  # fmt: skip
    a, b = pair
    url = a.database_url
    assert a.cgroup_parent != b.cgroup_parent
    wait_until(lambda: _row(url, "a") and _row(url, "b"), 30, "both rows")
    created = {}
    for node in (a, b):
        remote = RemoteNode(node.node_id, node.url, node.token)
        try:
            created[node.node_id] = (await remote.create(CONFIG)).sandbox_id
            assert [s.sandbox_id for s in await remote.list_sandboxes()] == [created[node.node_id]]
        finally:
            await remote.close()
    for node, other in ((a, b), (b, a)):
        sandbox_id = created[node.node_id]
        assert node.box_dir(sandbox_id).exists()
        assert not other.box_dir(sandbox_id).exists()
        assert all(d.exists() for d in node.cgroups(sandbox_id).dirs)
    ranges = [_uid_base(node, created[node.node_id]) for node in (a, b)]
    assert ranges[0] != ranges[1]
    _refused_as_taken(NodeAgent(a.state_dir, base_template, url, "c", NO_NETWORK),
                      f"state directory {a.state_dir}")  # fmt: skip
    same_parent = NodeAgent(tmp_path / "c", base_template, url, "c", NO_NETWORK)
    same_parent.cgroup_parent = b.cgroup_parent
    _refused_as_taken(same_parent, f"cgroup parent {b.cgroup_parent}")


def _uid_base(node: NodeAgent, sandbox_id: str) -> int:
    from sandboxd.host import uid_ranges
    from sandboxd.runtime.spec import RECORD

    claimed = uid_ranges.claimed_by(node.box_dir(sandbox_id) / RECORD)
    assert len(claimed) == 1
    return claimed[0]


def _refused_as_taken(node: NodeAgent, what: str) -> None:
    node.state_dir.mkdir(exist_ok=True)
    done = subprocess.run(node.argv(), capture_output=True, text=True, check=False,
                          env={**os.environ, **node.env})  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{what} is taken by another sandboxd on this host" in done.stderr


def test_heartbeats_survive_the_database_going_away(tmp_path: Path, base_template: Path) -> None:
    """Down at the agent's start, and again while it runs."""
    server = PostgresServer()
    try:
        server.start()
        url = server.create_database()
        server.halt()
        with running_node(tmp_path / "state", base_template, url, "steady",
                          "--heartbeat-s", "0.2") as node:  # fmt: skip
            _until_failed(node, 0)
            assert node.call_api("list_sandboxes").status_code == 200  # serving all the same
            server.launch()
            wait_until(lambda: _row(url, "steady"), 30, "the node's row")
            _after_two_heartbeats(url, "steady")
            failed = _failures(node)
            server.halt()
            _until_failed(node, failed)
            assert node.call_api("list_sandboxes").status_code == 200
            server.launch()
            _after_two_heartbeats(url, "steady")
    finally:
        server.stop()


def _failures(node: NodeAgent) -> int:
    return node.log.read_text().count(f"heartbeat of node {node.node_id} failed")


def _until_failed(node: NodeAgent, before: int) -> None:
    """Until the agent has logged a failed heartbeat after the `before` it had logged."""
    wait_until(lambda: _failures(node) > before, 60, "a failed heartbeat logged")
