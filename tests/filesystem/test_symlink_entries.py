"""EntryInfo.is_symlink over the wire: every response carrying an entry marks a symlink itself,
whatever it points to, while type and mode keep describing the target (as the reference does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from envd._gen.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    EventType,
    FilesystemEvent,
    FileType,
    GetWatcherEventsRequest,
    ListDirRequest,
    MoveRequest,
    RemoveWatcherRequest,
    StatRequest,
)
from tests.filesystem.watching import watching
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync
    from tests.envd_process import EnvdProcess

# name → (is_symlink, type) for the tree `_links` makes.
EXPECTED = {
    "dangling": (True, FileType.UNSPECIFIED),
    "dir": (False, FileType.DIRECTORY),
    "file.txt": (False, FileType.FILE),
    "loop": (True, FileType.UNSPECIFIED),
    "to-dir": (True, FileType.DIRECTORY),
    "to-file": (True, FileType.FILE),
}


def _links(root: Path) -> None:
    (root / "file.txt").write_text("x")
    (root / "dir").mkdir()
    (root / "to-file").symlink_to("file.txt")
    (root / "to-dir").symlink_to("dir")
    (root / "dangling").symlink_to("nowhere")
    (root / "loop").symlink_to("loop")


@pytest.fixture(params=["json", "proto"])
def client(request: pytest.FixtureRequest) -> FilesystemClientSync:
    """Both codecs: ListDir writes each codec's bytes by hand."""
    name = "fs" if request.param == "json" else "fs_proto"
    fixture: FilesystemClientSync = request.getfixturevalue(name)
    return fixture


def test_stat(client: FilesystemClientSync, workdir: Path) -> None:
    _links(workdir)
    found = {}
    for name in EXPECTED:
        entry = client.stat(StatRequest(path=str(workdir / name))).entry
        assert entry is not None
        found[name] = (entry.is_symlink, entry.type)
    assert found == EXPECTED


def test_list_dir(client: FilesystemClientSync, workdir: Path) -> None:
    _links(workdir)
    (workdir / "dir" / "inner").symlink_to("../file.txt")
    entries = client.list_dir(ListDirRequest(path=str(workdir), depth=2)).entries
    found = {e.path.removeprefix(f"{workdir}/"): (e.is_symlink, e.type) for e in entries}
    assert found == {**EXPECTED, "dir/inner": (True, FileType.FILE)}


def test_symlinked_root_lists_its_target_entries(
    client: FilesystemClientSync, workdir: Path
) -> None:
    _links(workdir)
    (workdir / "dir" / "plain").write_text("")
    entries = client.list_dir(ListDirRequest(path=str(workdir / "to-dir"))).entries
    assert [(e.name, e.is_symlink) for e in entries] == [("plain", False)]


def test_move(client: FilesystemClientSync, workdir: Path) -> None:
    _links(workdir)
    for name, expected in EXPECTED.items():
        request = MoveRequest(
            source=str(workdir / name), destination=str(workdir / f"{name}.moved")
        )
        entry = client.move(request).entry
        assert entry is not None
        # A moved link may now dangle (relative target): only the mark is certain.
        assert entry.is_symlink == expected[0], name


@pytest.mark.anyio
async def test_watch_dir_entry(envd: EnvdProcess, workdir: Path) -> None:
    (workdir / "file.txt").write_text("")
    async with watching(envd.url, str(workdir), include_entry=True, binary=True) as stream:
        (workdir / "to-file").symlink_to("file.txt")
        (created,) = await stream.messages(1)
    assert (created.name, created.type) == ("to-file", EventType.CREATE)
    assert created.entry is not None
    assert (created.entry.is_symlink, created.entry.type) == (True, FileType.FILE)


def test_polling_watcher_entry(fs: FilesystemClientSync, workdir: Path) -> None:
    request = CreateWatcherRequest(path=str(workdir), include_entry=True)
    watcher_id = fs.create_watcher(request).watcher_id
    try:
        (workdir / "dir").mkdir()
        (workdir / "to-dir").symlink_to("dir")
        events: list[FilesystemEvent] = []

        def both() -> bool:
            poll = GetWatcherEventsRequest(watcher_id=watcher_id)
            events.extend(fs.get_watcher_events(poll).events)
            return len(events) >= 2

        wait_until(both, 5, "CREATE events for dir and to-dir")
        found = {e.name: (e.entry.is_symlink, e.entry.type) for e in events if e.entry}
        assert found == {"dir": (False, FileType.DIRECTORY), "to-dir": (True, FileType.DIRECTORY)}
    finally:
        fs.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))
