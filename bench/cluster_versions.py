"""A change to the cluster's create path measured side by side in one run: `sandboxd serve` on
PostgreSQL (the baseline of issue 35's target), a cluster of one `sandboxd node` agent behind one
`sandboxd gateway` run from a checkout of another commit (`--baseline DIR`: its sandboxd first
on the path, as bench.sandboxd_lifecycle's), and one from this checkout; bench.cluster's rounds
(pooled create → first command by the unmodified Python SDK, then the proxied requests),
interleaved and reversed every other round, every serve and agent `--pool 1 --no-network`, the
cached base template. Two clusters of one agent each: the difference between them is the change,
their difference to serve what the target counts. bench.cluster's report of the three.

Run as root: .venv/bin/python -m bench.cluster_versions --baseline DIR [--rounds 14] [--creates 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.cluster import WRK_SCRIPT, Target, idle_cpu, report, rounds, with_app
from bench.sandboxd_lifecycle import parse_args, scratch
from tests.cluster.gateway import DOMAIN, Gateway
from tests.cluster.node_agent import NodeAgent
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    from collections.abc import Iterator

POOL = ("--pool", "1")


def cluster(work: Path, template: Path, db: PostgresServer, name: str,
            tree: Path | None) -> Target:  # fmt: skip
    """A gateway and one agent on a database of their own, from `tree` (None: this checkout)."""
    url, token = db.create_database(), secrets.token_hex(16)
    (state := work / f"{name}-node").mkdir()
    node = NodeAgent(state, template, with_app(url, "node"), "node-0", NO_NETWORK,
                     "--domain", DOMAIN, *POOL, token=token)  # fmt: skip
    gateway = Gateway(work / f"{name}-gateway", with_app(url, "control"), token)
    if tree is not None:
        for part in (node, gateway):
            part.command = [sys.executable, "-P", "-m", "sandboxd"]
            part.env = {**part.env, "PYTHONPATH": str(tree.absolute())}
    return Target(f"gateway {name}", gateway, url, [node])


@contextlib.contextmanager
def running_targets(work: Path, template: Path, baseline: Path) -> Iterator[list[Target]]:
    db = PostgresServer()
    with contextlib.ExitStack() as stack:
        stack.callback(db.stop)
        db.start()
        serve_url = db.create_database()
        targets = [
            Target("serve PG", Sandboxd(work / "serve-pg", template, NO_NETWORK, *POOL,
                   "--database-url", with_app(serve_url, "control")), serve_url),
            cluster(work, template, db, "baseline", baseline),
            cluster(work, template, db, "this", None),
        ]  # fmt: skip
        for target in targets:
            target.start(stack)
        yield targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of another commit")
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--creates", type=int, default=3, help="creates per round and target")
    args, template = parse_args(parser)
    with scratch("bench-cluster-versions-") as work, \
            running_targets(work, template, args.baseline) as targets:  # fmt: skip
        script = work / "percentiles.lua"
        script.write_text(WRK_SCRIPT)
        load_before = os.getloadavg()
        asyncio.run(rounds(targets, args.rounds, args.creates, script))
        idle_cpu(targets, 10)  # the report's idle rows
        load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) at start: {load_before}, at end: {load_after}")
    report(targets)


if __name__ == "__main__":
    main()
