"""CreateWatcher / GetWatcherEvents / RemoveWatcher over the wire (§6.7), including the
bounded buffer: a watcher nobody drains ends in an explicit error, not silent loss."""

from __future__ import annotations

import os
import re
import subprocess
from typing import TYPE_CHECKING

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    EventType,
    GetWatcherEventsRequest,
    RemoveWatcherRequest,
)
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync


def _poll_until(fs: FilesystemClientSync, watcher_id: str, count: int) -> list[tuple[str, int]]:
    """At least `count` events, gathered over as many GetWatcherEvents calls as it takes."""
    found: list[tuple[str, int]] = []

    def enough() -> bool:
        events = fs.get_watcher_events(GetWatcherEventsRequest(watcher_id=watcher_id)).events
        found.extend((e.name, e.type) for e in events)
        return len(found) >= count

    wait_until(enough, 5, f"{count} events from the watcher")
    return found


def test_lifecycle(fs: FilesystemClientSync, workdir: Path) -> None:
    watcher_id = fs.create_watcher(CreateWatcherRequest(path=str(workdir))).watcher_id
    assert re.fullmatch(r"w[a-z0-9]{20}", watcher_id)
    assert fs.get_watcher_events(GetWatcherEventsRequest(watcher_id=watcher_id)).events == []
    (workdir / "test.txt").write_text("x")
    events = _poll_until(fs, watcher_id, 2)
    assert events == [("test.txt", EventType.CREATE), ("test.txt", EventType.WRITE)]
    fs.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))
    with pytest.raises(ConnectError) as err:
        fs.get_watcher_events(GetWatcherEventsRequest(watcher_id=watcher_id))
    assert err.value.code == Code.NOT_FOUND
    assert err.value.message == f"watcher with id {watcher_id} not found"


def test_include_entry_and_recursive(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "sub").mkdir()
    watcher_id = fs_proto.create_watcher(
        CreateWatcherRequest(path=str(workdir), recursive=True, include_entry=True)
    ).watcher_id
    try:
        (workdir / "sub" / "f").write_text("")
        request = GetWatcherEventsRequest(watcher_id=watcher_id)
        events = wait_until(
            lambda: fs_proto.get_watcher_events(request).events, 5, "the event for sub/f"
        )
        assert events[0].name == "sub/f"
        assert events[0].entry is not None
        assert events[0].entry.path == str(workdir / "sub" / "f")
    finally:
        fs_proto.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))


def test_validation_matches_watch_dir(fs: FilesystemClientSync, workdir: Path) -> None:
    (workdir / "file").write_text("")
    for name, code in {"missing": Code.NOT_FOUND, "file": Code.INVALID_ARGUMENT}.items():
        with pytest.raises(ConnectError) as err:
            fs.create_watcher(CreateWatcherRequest(path=str(workdir / name)))
        assert err.value.code == code
    with pytest.raises(ConnectError) as err:
        fs.remove_watcher(RemoveWatcherRequest(watcher_id="wnope"))
    assert err.value.code == Code.NOT_FOUND


def test_undrained_watcher_reports_overflow(fs_proto: FilesystemClientSync, workdir: Path) -> None:
    # 100k events fill envd's buffer; envd then stops reading, the kernel queue (16384)
    # overflows, and the watcher reports it instead of dropping events silently.
    a, b = workdir / "a", workdir / "b"
    a.write_text("")
    b.write_text("")
    watcher_id = fs_proto.create_watcher(CreateWatcherRequest(path=str(workdir))).watcher_id
    try:
        for i in range(125_000):  # alternate, or inotify merges identical consecutive events
            os.utime(a if i % 2 else b, ns=(i, i))
        request = GetWatcherEventsRequest(watcher_id=watcher_id)

        def failure() -> ConnectError | None:
            try:
                fs_proto.get_watcher_events(request)
            except ConnectError as exc:
                return exc
            return None

        err = wait_until(failure, 10, "the watcher to report its overflow")
        assert err.code == Code.INTERNAL
        assert "overflow" in err.message
        with pytest.raises(ConnectError):  # sticky
            fs_proto.get_watcher_events(request)
    finally:
        fs_proto.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))


def test_recursive_watch_of_a_very_deep_tree(fs: FilesystemClientSync, workdir: Path) -> None:
    deepest = workdir / "/".join(["d"] * 1500)  # deeper than Python's recursion limit
    subprocess.run(["mkdir", "-p", str(deepest)], check=True)
    request = CreateWatcherRequest(path=str(workdir), recursive=True)
    watcher_id = fs.create_watcher(request).watcher_id
    try:
        (deepest / "leaf").write_text("")
        events = _poll_until(fs, watcher_id, 1)
        assert events[0] == (str((deepest / "leaf").relative_to(workdir)), EventType.CREATE)
    finally:
        fs.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))
        subprocess.run(["rm", "-rf", str(workdir / "d")], check=True)  # rmtree would recurse
