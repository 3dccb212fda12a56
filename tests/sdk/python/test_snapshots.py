"""Snapshots as the Python SDK takes them (normal mode only): E2B's own snapshot cases
(`test_snapshot_api.py`: create, boot from one, two children that diverge, list unfiltered, by
sandbox and by name, named snapshots, delete True then False, a directory and two files kept,
the class method), and what sandboxd adds to them: the source keeps running with its
processes and end, a filesystem-only snapshot, the refusals. Each test makes its own sandboxes
and deletes its snapshots."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from e2b import AsyncSandbox, Sandbox, SandboxException, SandboxNotFoundException

from tests.sdk.python import sandboxes
from tests.sdk.python.mode import normal_only
from tests.sdk.python.sandboxes import create

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = normal_only
made = sandboxes.made


@pytest.fixture
def snapshots(made: list[Sandbox]) -> Iterator[list[str]]:
    """Snapshot ids a test takes (appended by it), deleted afterwards whatever happened, once
    the test's sandboxes are killed (a snapshot is not deleted while its sandboxes run)."""
    taken: list[str] = []
    yield taken
    for sandbox in made:
        Sandbox.kill(sandbox.sandbox_id)
    for snapshot_id in taken:
        Sandbox.delete_snapshot(snapshot_id)


def listed(**options: str) -> list[str]:
    return [s.snapshot_id for s in Sandbox.list_snapshots(**options).next_items()]


def test_create_snapshot_and_a_sandbox_from_it(made: list[Sandbox], snapshots: list[str]) -> None:
    sandbox = create(made)
    test_content = "content from original sandbox"
    sandbox.files.write("/home/user/test.txt", test_content)
    snapshot = sandbox.create_snapshot()
    snapshots.append(snapshot.snapshot_id)
    assert snapshot.snapshot_id
    assert snapshot.names == []
    new_sandbox = create(made, template=snapshot.snapshot_id)
    assert new_sandbox.sandbox_id != sandbox.sandbox_id
    assert new_sandbox.files.read("/home/user/test.txt") == test_content


def test_the_source_runs_on_with_its_processes_and_end(
    made: list[Sandbox], snapshots: list[str]
) -> None:
    sandbox = create(made, envs={"TEST_VAR": "sfisback"})
    sleeper = sandbox.commands.run("sleep 3600", background=True)
    end_at = sandbox.get_info().end_at
    snapshots.append(Sandbox.create_snapshot(sandbox.sandbox_id).snapshot_id)  # class method
    assert sandbox.is_running()
    assert sandbox.get_info().end_at == end_at
    assert sleeper.pid in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.run("echo $TEST_VAR").stdout == "sfisback\n"
    child = create(made, template=snapshots[0])
    assert child.commands.run("pgrep -x sleep || echo none").stdout == "none\n"


def test_create_multiple_sandboxes_from_snapshot(made: list[Sandbox], snapshots: list[str]) -> None:
    sandbox = create(made)
    test_content = "shared snapshot content"
    sandbox.files.write("/home/user/shared.txt", test_content)
    snapshot = sandbox.create_snapshot()
    snapshots.append(snapshot.snapshot_id)
    sandbox1 = create(made, template=snapshot.snapshot_id)
    sandbox2 = create(made, template=snapshot.snapshot_id)
    assert sandbox1.files.read("/home/user/shared.txt") == test_content
    assert sandbox2.files.read("/home/user/shared.txt") == test_content
    sandbox1.files.write("/home/user/shared.txt", "modified in sandbox1")
    assert sandbox1.files.read("/home/user/shared.txt") == "modified in sandbox1"
    assert sandbox2.files.read("/home/user/shared.txt") == test_content


def test_list_snapshots_unfiltered_by_sandbox_and_by_name(
    made: list[Sandbox], snapshots: list[str]
) -> None:
    sandbox = create(made)
    unnamed = sandbox.create_snapshot()
    snapshots.append(unnamed.snapshot_id)
    snapshot_name = f"snap-filter-{uuid.uuid4().hex[:12]}"
    named = sandbox.create_snapshot(name=snapshot_name)
    snapshots.append(named.snapshot_id)

    paginator = Sandbox.list_snapshots()
    assert paginator.has_next
    everything = [s.snapshot_id for s in paginator.next_items()]
    assert {unnamed.snapshot_id, named.snapshot_id} <= set(everything)
    assert listed(sandbox_id=sandbox.sandbox_id) == [named.snapshot_id, unnamed.snapshot_id]
    mine = [s.snapshot_id for s in sandbox.list_snapshots().next_items()]
    assert mine == [named.snapshot_id, unnamed.snapshot_id]
    assert listed(name=snapshot_name) == [named.snapshot_id]
    assert listed(name=f"{snapshot_name}-does-not-exist") == []

    paged = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id, limit=1)
    pages = [paged.next_items()]
    assert paged.has_next
    pages.append(paged.next_items())
    assert not paged.has_next
    assert pages == [[named], [unnamed]]


def test_create_named_snapshot(made: list[Sandbox], snapshots: list[str]) -> None:
    sandbox = create(made)
    snapshot_name = f"snap-{uuid.uuid4().hex[:12]}"
    snapshot = sandbox.create_snapshot(name=snapshot_name)
    snapshots.append(snapshot.snapshot_id)
    assert snapshot.snapshot_id == f"{snapshot_name}:default"
    assert any(snapshot_name in n for n in snapshot.names)


def test_delete_snapshot(made: list[Sandbox]) -> None:
    snapshot = create(made).create_snapshot()
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False


def test_snapshot_preserves_filesystem(made: list[Sandbox], snapshots: list[str]) -> None:
    sandbox = create(made)
    app_dir = "/home/user/app"
    sandbox.files.make_dir(app_dir)
    sandbox.files.write(f"{app_dir}/config.json", '{"env": "test"}')
    sandbox.files.write(f"{app_dir}/data.txt", "important data")
    snapshot = sandbox.create_snapshot(mode="filesystem")
    snapshots.append(snapshot.snapshot_id)
    new_sandbox = create(made, template=snapshot.snapshot_id)
    assert new_sandbox.files.exists(app_dir)
    assert new_sandbox.files.read(f"{app_dir}/config.json") == '{"env": "test"}'
    assert new_sandbox.files.read(f"{app_dir}/data.txt") == "important data"


def test_refusals(made: list[Sandbox], snapshots: list[str]) -> None:
    sandbox = create(made)
    with pytest.raises(SandboxException, match="Invalid name: alias 'a b'"):
        sandbox.create_snapshot(name="a b")
    snapshot = sandbox.create_snapshot()
    snapshots.append(snapshot.snapshot_id)
    child = create(made, template=snapshot.snapshot_id)
    with pytest.raises(SandboxException, match="is used by sandboxes"):
        Sandbox.delete_snapshot(snapshot.snapshot_id)
    child.kill()
    assert sandbox.pause()
    with pytest.raises(SandboxNotFoundException):
        sandbox.create_snapshot()


@pytest.mark.anyio
async def test_the_async_sdk_takes_lists_and_deletes_them(made: list[Sandbox]) -> None:
    sandbox = await AsyncSandbox.create()
    made.append(Sandbox.connect(sandbox.sandbox_id))
    snapshot = await sandbox.create_snapshot()
    page = await AsyncSandbox.list_snapshots(sandbox_id=sandbox.sandbox_id).next_items()
    assert [s.snapshot_id for s in page] == [snapshot.snapshot_id]
    assert await AsyncSandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert await AsyncSandbox.delete_snapshot(snapshot.snapshot_id) is False
