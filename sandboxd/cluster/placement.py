"""Where a new sandbox goes: best-of-K over the live nodes' heartbeats (sandboxd.store.rows
NodeRow), as E2B's API places them (infra placement_best_of_K.go: K = 3 nodes sampled, the one
of lowest (cpu requested + reserved + 0.5 x usage) / (4 x cpus) taken). Before sampling, the
candidates narrow to the nodes with a warm sandbox of the template, else to those holding its
layers, when any do: a warm create is a few ms, a boot from layers on disk tens, a pull more."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from sandboxd.store.rows import NodeRow

K: Final = 3
OVERCOMMIT: Final = 4  # E2B's R: the score's capacity is 4 x a node's CPUs
USAGE_WEIGHT: Final = 0.5  # E2B's alpha


def alive(node: NodeRow, now_us: int) -> bool:
    """Whether the node's lease still runs."""
    return now_us < node.heartbeat_us + node.lease_s * 1_000_000


def score(node: NodeRow, cpus_asked: int, reserved: int) -> float:
    """E2B's score (lower is better); `reserved`: vCPUs of creates placed there and not yet
    in its heartbeat."""
    status = node.status
    cpus = int(status.get("cpus", 0))
    if cpus <= 0:
        return float("inf")
    allocated = int(status.get("cpu_requested", 0)) + reserved
    usage = float(status.get("cpu_usage", 0.0))
    return (cpus_asked + allocated + USAGE_WEIGHT * usage) / (OVERCOMMIT * cpus)


def fits(node: NodeRow) -> bool:
    """Under the node's own sandbox limit. (vCPUs are not a limit, as with E2B's default
    configuration, which skips its CanFit check: a node overcommits; the score spreads.)"""
    status = node.status
    limit = status.get("max_sandboxes")
    return limit is None or int(status.get("sandboxes", 0)) < int(limit)


def candidates(nodes: list[NodeRow], now_us: int, excluded: Collection[str]) -> list[NodeRow]:
    """The live nodes that are not draining (drained by an operator, or stopping), not
    `excluded` and have room."""
    return [
        n for n in nodes
        if alive(n, now_us) and not n.draining and not n.status.get("stopping")
        and n.node_id not in excluded and fits(n)
    ]  # fmt: skip


def preferred(nodes: list[NodeRow], template_id: str) -> list[NodeRow]:
    """The nodes with a warm sandbox of the template, else those holding its layers, else
    all of them."""
    warm = [n for n in nodes if int(n.status.get("warm", {}).get(template_id, 0)) > 0]
    if warm:
        return warm
    holding = [n for n in nodes if template_id in n.status.get("templates", ())]
    return holding or nodes


def choose(nodes: list[NodeRow], template_id: str, cpus_asked: int, now_us: int,
           excluded: Collection[str] = (), reserved: Mapping[str, int] | None = None,
           rng: random.Random | None = None) -> NodeRow | None:  # fmt: skip
    """The node a sandbox of the template asking `cpus_asked` vCPUs goes to; None when no
    node can take it."""
    reserved = reserved or {}
    pool = preferred(candidates(nodes, now_us, excluded), template_id)
    if not pool:
        return None
    sampled = (rng or random).sample(pool, min(K, len(pool)))
    return min(sampled, key=lambda n: score(n, cpus_asked, reserved.get(n.node_id, 0)))


def no_node(refusals: Mapping[str, str], home: str | None = None) -> str:
    """Why no node took a sandbox, from each one's refusal (none: no candidate at all);
    `home`: the one node it may go to (the node holding its volumes)."""
    if not refusals and home is not None:
        return f"node {home}, which holds the sandbox's volumes, has no room for it"
    if not refusals:
        return "no node can take the sandbox: none is alive, undrained and with room"
    tried = "; ".join(f"{node}: {why}" for node, why in refusals.items())
    return f"no node took the sandbox (tried {tried})"
