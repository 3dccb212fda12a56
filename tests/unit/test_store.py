"""The store's contract (sandboxd.store.interface) as every backend must keep it, on the SQLite
one: rows come back as they went in, `write` commits its changes together or not at all, keys
are kept only hashed; and SQLite's own promise, a state directory reopens at the newest schema
without losing what it held."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from typing import TYPE_CHECKING

import pytest

from sandboxd.store.rows import (
    BuildRow,
    LogLine,
    MetricSample,
    SandboxRow,
    TemplateRow,
    VolumeRow,
)
from sandboxd.store.sqlite.database import DB_FILE, migrations
from sandboxd.store.sqlite.store import SqliteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.store.interface import Store

pytestmark = pytest.mark.anyio

TEMPLATE = TemplateRow("t1", "alias", "b1", "/rootfs", 2, 512, 0, "ready", "0.1", 1, 2)
SANDBOX = SandboxRow("s1", "t1", "alias", "running", 1, 2, 60, False, True, 2, 512, 0, "0.1",
                     metadata={"k": "v"}, options={"network": {"allowOut": ["1.1.1.1"]}},
                     uid_base=65536)  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened: Store = SqliteStore(tmp_path)  # mypy holds SqliteStore to the interface here
    yield opened
    opened.close()


async def test_rows_come_back_as_they_went_in(store: Store) -> None:
    build = BuildRow("b1", "t1", "ready", 2, 512, 0, 1, 2, tags=["default"], image=None)
    sample = MetricSample(5, 2, 12.5, 1, 2, 3, 4, 5)
    await store.write(
        functools.partial(store.put_template, TEMPLATE),
        functools.partial(store.put_sandbox, SANDBOX),
        functools.partial(store.put_build, build),
        functools.partial(store.add_log_lines, "b1", [LogLine(0, 1, "info", "hi", "step 1")]),
        functools.partial(store.add_metric, "s1", sample),
        functools.partial(store.count_spawn, "t1", 7),
    )
    assert store.template("alias") == TemplateRow(
        **{**vars(TEMPLATE), "spawn_count": 1, "last_spawned_at": 7}
    )
    assert store.sandboxes() == [SANDBOX]
    assert store.build("b1") == build
    assert store.log_lines("b1", 0, 10) == [LogLine(0, 1, "info", "hi", "step 1")]
    assert store.metrics("s1", None, None) == [sample]


async def test_a_sandbox_paused_to_disk_comes_back_with_what_it_boots(store: Store) -> None:
    image = {"layers": ["/l/base", "/l/pause-s2-1"], "init": "systemd", "io_uring": False,
             "limits": {"memory_bytes": 1 << 29, "cpus": 2, "pids": 4096}}  # fmt: skip
    paused = SandboxRow(**{**vars(SANDBOX), "sandbox_id": "s2", "state": "paused",
                           "pause_mode": "filesystem", "disk_image": image})  # fmt: skip
    await store.write(functools.partial(store.put_sandbox, paused))
    assert store.sandboxes() == [paused]


async def test_volumes_by_id_and_name_each_name_once(store: Store) -> None:
    first = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0001", "data", 1024, 1)
    second = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0002", "cache", 16, 2)
    await store.write(functools.partial(store.add_volume, first),
                      functools.partial(store.add_volume, second))  # fmt: skip
    assert store.volume(first.volume_id) == first
    assert store.volume_named("cache") == second
    assert store.volumes() == [first, second]
    taken = VolumeRow("0b5e2a6e-6f0c-4a47-9a53-1d9a3e0c0003", "data", 16, 3)
    with pytest.raises(sqlite3.IntegrityError):
        await store.write(functools.partial(store.add_volume, taken))
    await store.write(functools.partial(store.delete_volume, first.volume_id))
    assert store.volume(first.volume_id) is None
    assert store.volume_named("data") is None
    assert store.volumes() == [second]


async def test_a_write_commits_all_its_changes_or_none(store: Store) -> None:
    def fail() -> None:
        raise RuntimeError("a change that fails")

    with pytest.raises(RuntimeError):
        await store.write(functools.partial(store.put_template, TEMPLATE), fail)
    assert store.templates() == []
    await store.write(functools.partial(store.put_template, TEMPLATE))
    assert store.templates() == [TEMPLATE]


async def test_keys_are_kept_only_hashed(store: Store, tmp_path: Path) -> None:
    key = "e2b_" + "ab" * 20
    await store.write(functools.partial(store.add_key, key, 1))
    assert store.has_key(key)
    assert not store.has_key("e2b_" + "cd" * 20)
    assert key.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())


async def test_a_state_directory_reopens_at_the_newest_schema(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path)
    await first.write(functools.partial(first.put_template, TEMPLATE))
    first.close()
    again = SqliteStore(tmp_path)
    try:
        assert again.templates() == [TEMPLATE]
    finally:
        again.close()
    with contextlib.closing(sqlite3.connect(tmp_path / DB_FILE)) as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
    assert version == migrations()[-1][0]
