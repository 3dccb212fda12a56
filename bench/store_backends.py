"""The store's two backends side by side, in one run: SQLite in the state directory (the
default) against PostgreSQL (Debian's server, started here on loopback as the tests start it:
tests/store/postgres_server.py, `synchronous_commit = off` as SQLite's `synchronous = NORMAL`).

Through the API of two real `sandboxd serve`s (`--no-network`, `--pool 1`, the cached base
template), round by round one after the other: `GET /templates` (the key's check and the
templates' read, both store reads on the event loop), `GET /v2/sandboxes` (the key's check; the
list is in memory), and a pooled create (`POST /sandboxes`, its writes on the store's thread)
then its kill, each create after the pool is full again. In-process, the store's own calls on
each backend: `has_key`, `template`, and a `write` of one sandbox row.

Baseline: the SQLite store; target: PostgreSQL's create and list within 1 ms of SQLite's
p50 on loopback (the scale-out design's budget for a gateway is 3 ms per create).

Run as root: .venv/bin/python -m bench.store_backends [--rounds 30] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import pool_full
from sandboxd.daemon.serve import open_store
from sandboxd.host.removal import remove_tree
from sandboxd.store.rows import SandboxRow
from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd
from tests.sandboxd.template_cache import ensure_base_template
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.store.interface import Store

Samples = dict[str, list[float]]


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def api_round(server: Sandboxd, samples: Samples, requests: int) -> None:
    with server.client() as api:
        for path in ("/templates", "/v2/sandboxes"):
            for _ in range(requests):
                started = time.perf_counter()
                assert api.get(path).status_code == 200
                samples[path].append(time.perf_counter() - started)
        asyncio.run(pool_full(server, 1, set()))
        started = time.perf_counter()
        created = api.post("/sandboxes", json={"templateID": "base"})
        samples["create"].append(time.perf_counter() - started)
        assert created.status_code == 201, created.text
        started = time.perf_counter()
        assert api.delete(f"/sandboxes/{created.json()['sandboxID']}").status_code == 204
        samples["kill"].append(time.perf_counter() - started)


def timed(samples: list[float], call: Callable[[], object], times: int) -> None:
    for _ in range(times):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)


async def store_calls(store: Store, samples: Samples, times: int) -> None:
    row = SandboxRow("s-bench", "base", None, "running", 1, 2, 60, False, False, 1, 512, 0, "0.1")
    timed(samples["has_key"], functools.partial(store.has_key, API_KEY), times)
    timed(samples["template"], functools.partial(store.template, "base"), times)
    for _ in range(times):
        started = time.perf_counter()
        await store.write(functools.partial(store.put_sandbox, row))
        samples["write"].append(time.perf_counter() - started)
    await store.write(functools.partial(store.delete_sandbox, row.sandbox_id))


def report(results: dict[str, Samples]) -> None:
    sqlite, postgres = results["sqlite"], results["postgres"]
    print(f"{'p50, ms':32} {'SQLite':>9} {'PostgreSQL':>11} {'difference':>11}")
    for name in sqlite:
        a, b = p50_ms(sqlite[name]), p50_ms(postgres[name])
        print(f"{name + f' (n={len(sqlite[name])})':32} {a:9.3f} {b:11.3f} {b - a:+11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--template", type=Path)
    args = parser.parse_args()
    template = args.template or ensure_base_template()
    database = PostgresServer()
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    servers: dict[str, Sandboxd] = {}
    results: dict[str, Samples] = {}
    try:
        database.start()
        url = database.create_database()
        urls = {"sqlite": None, "postgres": url}
        for name, database_url in urls.items():
            flags = ("--database-url", database_url) if database_url else ()
            servers[name] = Sandboxd(work / name, template, NO_NETWORK, "--pool", "1", *flags)
            servers[name].start()
            results[name] = {k: [] for k in ("/templates", "/v2/sandboxes", "create", "kill")}
        for _ in range(args.rounds):
            for name, server in servers.items():
                api_round(server, results[name], 10)
        for name, server in servers.items():
            server.stop()
            store = open_store(work / name, urls[name])
            try:
                calls: Samples = {"has_key": [], "template": [], "write": []}
                asyncio.run(store_calls(store, calls, 300))
                results[name].update(calls)
            finally:
                store.close()
        report(results)
    finally:
        for server in servers.values():
            server.clean_up()
        database.stop()
        remove_tree(work)


if __name__ == "__main__":
    main()
