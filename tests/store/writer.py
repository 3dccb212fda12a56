"""A second process writing to a store, for tests/unit/test_store.py's concurrency test:
`python -m tests.store.writer STATE_DIR DATABASE_URL NAME COUNT GATE_DIR` opens the store as
serve does (DATABASE_URL "-": SQLite in STATE_DIR), says it is ready (GATE_DIR/NAME), waits
for GATE_DIR/go, then makes COUNT writes, each one sandbox NAME-i and one spawn of the
template t1."""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

from sandboxd.daemon.serve import open_store
from sandboxd.store.rows import SandboxRow
from tests.waiting import wait_until


def sandbox(sandbox_id: str, started_at: int) -> SandboxRow:
    return SandboxRow(sandbox_id, "t1", None, "running", started_at, started_at + 60, 60, False,
                      False, 1, 256, 0, "0.1")  # fmt: skip


async def write(state_dir: Path, url: str | None, name: str, count: int, gate: Path) -> None:
    store = open_store(state_dir, url)
    try:
        (gate / name).touch()
        wait_until((gate / "go").exists, 60, "the go")
        for i in range(count):
            await store.write(
                functools.partial(store.put_sandbox, sandbox(f"{name}-{i}", i)),
                functools.partial(store.count_spawn, "t1", i),
            )
    finally:
        store.close()


if __name__ == "__main__":
    state, url, name, count, gate = sys.argv[1:]
    asyncio.run(write(Path(state), None if url == "-" else url, name, int(count), Path(gate)))
