"""Placement (sandboxd.cluster.placement) over plain node rows: only live nodes, neither
draining nor stopping, with room; a warm sandbox of the template first, then its layers; the
lowest of E2B's best-of-K score among those sampled; a node's lease ends when its last
heartbeat is lease_s old."""

from __future__ import annotations

import random
from typing import Any

from sandboxd.cluster import placement
from sandboxd.store.rows import NodeRow

NOW = 1_000_000_000_000


def node(name: str, *, heartbeat_us: int = NOW, draining: bool = False, **status: Any) -> NodeRow:
    full = {"cpus": 4, "max_sandboxes": 100, "sandboxes": 0, "cpu_requested": 0,
            "cpu_usage": 0.0, "warm": {}, "templates": []} | status  # fmt: skip
    return NodeRow(name, f"http://{name}:49990", f"{name}:49991", heartbeat_us, 10, draining, full)


def choose(nodes: list[NodeRow], **kwargs: Any) -> str | None:
    chosen = placement.choose(nodes, "base", 2, NOW, rng=random.Random(7), **kwargs)  # noqa: S311
    return None if chosen is None else chosen.node_id


def test_the_least_loaded_of_the_sampled_nodes_is_taken() -> None:
    nodes = [node("a", cpu_requested=8), node("b", cpu_requested=2), node("c", cpu_usage=5.0)]
    assert choose(nodes) == "b"  # (2+2+0)/16 < (2+0+2.5)/16 < (2+8)/16


def test_the_score_is_e2bs() -> None:
    row = node("a", cpus=8, cpu_requested=6, cpu_usage=4.0)
    assert placement.score(row, 2, 3) == (2 + 6 + 3 + 0.5 * 4.0) / (4 * 8)
    assert placement.score(node("z", cpus=0), 1, 0) == float("inf")


def test_dead_draining_stopping_full_and_excluded_nodes_get_nothing() -> None:
    dead = node("dead", heartbeat_us=NOW - 10_000_000)
    assert not placement.alive(dead, NOW)
    assert placement.alive(node("fresh", heartbeat_us=NOW - 9_999_999), NOW)
    full = node("full", sandboxes=100)
    nodes = [dead, node("drained", draining=True), node("stopping", stopping=True), full,
             node("tried")]  # fmt: skip
    assert choose(nodes, excluded={"tried"}) is None
    assert choose(nodes) == "tried"


def test_a_warm_sandbox_comes_first_then_the_templates_layers() -> None:
    idle = node("idle")
    holding = node("holding", cpu_requested=6, templates=["base"])
    warm = node("warm", cpu_requested=12, warm={"base": 1})
    assert choose([idle, holding, warm]) == "warm"
    assert choose([idle, holding, node("cold-warm", warm={"base": 0})]) == "holding"
    assert choose([idle, node("other", warm={"other": 2})]) in {"idle", "other"}


def test_creates_under_way_count_against_their_node() -> None:
    nodes = [node("a"), node("b", cpu_requested=1)]
    assert choose(nodes) == "a"
    assert choose(nodes, reserved={"a": 2}) == "b"
    # vCPUs are no limit (E2B's default): past 4 x its CPUs a node still takes one.
    assert choose(nodes, reserved={"a": 40, "b": 30}) == "b"


def test_at_most_k_nodes_are_compared() -> None:
    rows = [node(f"n{i}", cpu_requested=i) for i in range(10)]
    seen = set()
    for seed in range(200):
        chosen = placement.choose(rows, "base", 1, NOW, rng=random.Random(seed))  # noqa: S311
        assert chosen is not None
        seen.add(chosen.node_id)
    # Best of 3 samples: the 2 most loaded nodes can never win, the least loaded often does.
    assert seen.isdisjoint({"n8", "n9"})
    assert "n0" in seen
