"""A node agent's store (sandboxd.store.node_store) over two real SQLite stores standing for
its own and the shared one: templates, builds, tags, snapshots and teams read and written in
the shared one, sandboxes in its own; one `write` holding both lands in each; a spawn is
counted in neither (a gateway counts it); the shared one away answers StoreUnavailable for
its tables while the agent's own still answer."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import StoreUnavailable
from sandboxd.store.node_store import NodeStore
from sandboxd.store.rows import BuildRow, SandboxRow, SnapshotRow, TemplateRow
from sandboxd.store.sqlite.store import SqliteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.store.interface import Store

pytestmark = pytest.mark.anyio

TEMPLATE = TemplateRow("t1", "alias", "b1", "layers/x", 2, 512, 0, "ready", "0.1", 1, 2)
BUILD = BuildRow("b1", "t1", "ready", 2, 512, 0, 1, 2, tags=["default"])
SANDBOX = SandboxRow("s1", "t1", "alias", "running", 1, 2, 60, False, True, 2, 512, 0, "0.1")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SqliteStore, SqliteStore]]:
    (tmp_path / "own").mkdir()
    (tmp_path / "shared").mkdir()
    own, shared = SqliteStore(tmp_path / "own"), SqliteStore(tmp_path / "shared")
    yield own, shared
    own.close()
    shared.close()


def opened(own: Store, shared: Store, seen: list[Store]) -> NodeStore:
    node = NodeStore(own, lambda: shared, seen.append)
    assert node.shared() is shared
    return node


async def test_a_write_of_both_lands_in_each(stores: tuple[SqliteStore, SqliteStore]) -> None:
    own, shared = stores
    seen: list[Store] = []
    store = opened(own, shared, seen).as_store()
    assert seen == [shared]  # the hook ran once, on the first open
    await store.write(
        functools.partial(store.put_template, TEMPLATE),
        functools.partial(store.put_build, BUILD),
        functools.partial(store.put_sandbox, SANDBOX),
        functools.partial(store.put_tag, "t1", "default", "b1", 3),
        functools.partial(store.put_snapshot, SnapshotRow("b1", "t1", "s1", 3)),
    )
    assert shared.template("t1") == TEMPLATE
    assert own.template("t1") is None
    assert [b.build_id for b in shared.builds("t1")] == ["b1"]
    assert shared.tag("t1", "default") is not None
    assert [s.build_id for s in shared.snapshots()] == ["b1"]
    assert [s.sandbox_id for s in own.sandboxes()] == ["s1"]
    assert shared.sandboxes() == []
    assert store.template("alias") == TEMPLATE
    assert [s.sandbox_id for s in store.sandboxes()] == ["s1"]


async def test_the_shared_store_away_fails_its_tables_only(
    stores: tuple[SqliteStore, SqliteStore],
) -> None:
    own, _ = stores

    def away() -> Store:
        raise StoreUnavailable("the database is unavailable")

    node = NodeStore(own, away, lambda _: None)
    with pytest.raises(StoreUnavailable):
        node.shared()
    store = node.as_store()
    with pytest.raises(StoreUnavailable):
        store.templates()
    await store.write(functools.partial(store.put_sandbox, SANDBOX))
    assert [s.sandbox_id for s in store.sandboxes()] == ["s1"]


async def test_a_spawn_is_counted_on_neither_store(
    stores: tuple[SqliteStore, SqliteStore],
) -> None:
    # A node's creates are counted by the gateway recording them (sandboxd.cluster.nodes).
    own, shared = stores
    store = opened(own, shared, []).as_store()
    await store.write(functools.partial(store.put_template, TEMPLATE))
    await store.write(functools.partial(store.count_spawn, "t1", 5))
    counted = shared.template("t1")
    assert counted is not None
    assert (counted.spawn_count, counted.last_spawned_at) == (0, None)
    assert own.template("t1") is None
