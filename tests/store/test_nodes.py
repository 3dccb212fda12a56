"""The store's `Nodes` (sandboxd.store.interface) on both backends, SQLite in a state directory
and PostgreSQL in a database of Debian's server started for the run: a heartbeat inserts a node
or replaces all of its row but the drain flag, the flag is set only on a node that exists, and
nodes are listed by id."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pytest

from sandboxd.daemon.serve import open_store
from sandboxd.store.rows import NodeRow

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.store.interface import Store

pytestmark = pytest.mark.anyio

STATUS = {"cpus": 4, "memory_mb": 8192, "max_sandboxes": 20, "sandboxes": 1,
          "cpu_requested": 2, "cpu_usage": 0.5, "memory_used_mb": 900,
          "warm": {"base": 2}, "templates": ["base", "t2"]}  # fmt: skip


def node(node_id: str, heartbeat_us: int, **changes: object) -> NodeRow:
    row = NodeRow(node_id, f"http://10.0.0.{heartbeat_us % 250}:49990", "10.0.0.1:49991",
                  heartbeat_us, 10, status=STATUS)  # fmt: skip
    return NodeRow(**{**vars(row), **changes})


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    opened = open_store(tmp_path, url)
    yield opened
    opened.close()


async def test_a_heartbeat_registers_a_node_and_nodes_come_by_id(store: Store) -> None:
    assert store.nodes() == []
    assert not await _heartbeat(store, node("b", 2))
    assert not await _heartbeat(store, node("a", 1))
    assert store.nodes() == [node("a", 1), node("b", 2)]
    assert store.node("b") == node("b", 2)
    assert store.node("c") is None


async def test_a_heartbeat_replaces_everything_but_the_drain_flag(store: Store) -> None:
    assert not await _heartbeat(store, node("a", 1))
    assert await _set_draining(store, "a", True)
    later = node("a", 7, api_url="http://10.9.9.9:1", proxy_address="10.9.9.9:2", lease_s=30,
                 status={"cpus": 1, "warm": {}, "templates": []})  # fmt: skip
    assert await _heartbeat(store, later)  # the drain read back
    assert store.nodes() == [NodeRow(**{**vars(later), "draining": True})]
    assert await _set_draining(store, "a", False)
    assert not await _heartbeat(store, node("a", 8, draining=True))
    assert store.nodes() == [node("a", 8)]
    assert await _heartbeat(store, node("new", 9, draining=True))  # a new row takes it


async def test_draining_a_node_that_is_not_there_says_so(store: Store) -> None:
    assert not await _set_draining(store, "ghost", True)
    assert store.nodes() == []


async def test_a_deleted_node_is_gone(store: Store) -> None:
    await _heartbeat(store, node("a", 1))
    await _heartbeat(store, node("b", 1))
    await store.write(functools.partial(store.delete_node, "a"))
    assert [n.node_id for n in store.nodes()] == ["b"]
    assert store.node("a") is None


async def _set_draining(store: Store, node_id: str, draining: bool) -> bool:
    """The store's answer, from inside a write (as `sandboxd node drain` calls it)."""
    answers: list[bool] = []
    await store.write(lambda: answers.append(store.set_node_draining(node_id, draining)))
    return answers[0]


async def _heartbeat(store: Store, row: NodeRow) -> bool:
    """The heartbeat's write; the drain flag it read back."""
    drained: list[bool] = []
    await store.write(lambda: drained.append(store.heartbeat_node(row)))
    return drained[0]
