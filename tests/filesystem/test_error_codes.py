"""Contract: the Connect code of every filesystem RPC failure, as Go envd answers it (§6).

The SDKs turn codes into exception types, so each row pins one code that must not drift.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    GetWatcherEventsRequest,
    ListDirRequest,
    MakeDirRequest,
    MoveRequest,
    RemoveRequest,
    RemoveWatcherRequest,
    StatRequest,
)

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync

# (rpc, request factory taking the prepared workdir, expected code)
CASES: list[tuple[str, Any, Code]] = [
    ("stat", lambda w: StatRequest(path=f"{w}/missing"), Code.NOT_FOUND),
    ("stat", lambda w: StatRequest(path=f"{w}/file/below-a-file"), Code.INTERNAL),
    ("stat", lambda w: StatRequest(path="~other/x"), Code.INVALID_ARGUMENT),
    ("stat", lambda w: StatRequest(path=f"{w}/nul\x00byte"), Code.INVALID_ARGUMENT),
    ("make_dir", lambda w: MakeDirRequest(path=str(w)), Code.ALREADY_EXISTS),
    ("make_dir", lambda w: MakeDirRequest(path=f"{w}/file"), Code.INVALID_ARGUMENT),
    ("make_dir", lambda w: MakeDirRequest(path=f"{w}/file/sub"), Code.INTERNAL),
    ("make_dir", lambda w: MakeDirRequest(path="~other"), Code.INVALID_ARGUMENT),
    ("move", lambda w: MoveRequest(source=f"{w}/missing", destination=f"{w}/x"), Code.NOT_FOUND),
    ("move", lambda w: MoveRequest(source=f"{w}/dir", destination=f"{w}/full"), Code.INTERNAL),
    ("move", lambda w: MoveRequest(source=f"{w}/dir", destination=f"{w}/file/x"), Code.INTERNAL),
    ("move", lambda w: MoveRequest(source="~other", destination=f"{w}/x"), Code.INVALID_ARGUMENT),
    ("move", lambda w: MoveRequest(source=f"{w}/file", destination=f"{w}/dir"), Code.INTERNAL),
    ("list_dir", lambda w: ListDirRequest(path=f"{w}/missing"), Code.NOT_FOUND),
    ("list_dir", lambda w: ListDirRequest(path=f"{w}/file"), Code.INVALID_ARGUMENT),
    ("list_dir", lambda w: ListDirRequest(path=f"{w}/loop"), Code.FAILED_PRECONDITION),
    ("list_dir", lambda w: ListDirRequest(path="~other"), Code.INVALID_ARGUMENT),
    ("list_dir", lambda w: ListDirRequest(path=f"{w}/file/x"), Code.INTERNAL),
    ("remove", lambda w: RemoveRequest(path="~other"), Code.INVALID_ARGUMENT),
    ("create_watcher", lambda w: CreateWatcherRequest(path=f"{w}/missing"), Code.NOT_FOUND),
    ("create_watcher", lambda w: CreateWatcherRequest(path=f"{w}/file"), Code.INVALID_ARGUMENT),
    ("create_watcher", lambda w: CreateWatcherRequest(path="~other"), Code.INVALID_ARGUMENT),
    ("get_watcher_events", lambda w: GetWatcherEventsRequest(watcher_id="w0"), Code.NOT_FOUND),
    ("remove_watcher", lambda w: RemoveWatcherRequest(watcher_id="w0"), Code.NOT_FOUND),
]


@pytest.fixture
def prepared(workdir: Path) -> Path:
    (workdir / "file").write_text("")
    (workdir / "dir").mkdir()
    (workdir / "full").mkdir()
    (workdir / "full" / "occupant").write_text("")
    (workdir / "loop").symlink_to("loop")
    return workdir


@pytest.mark.parametrize(("rpc", "request_for", "code"), CASES)
def test_error_code(
    fs: FilesystemClientSync, prepared: Path, rpc: str, request_for: Any, code: Code
) -> None:
    with pytest.raises(ConnectError) as err:
        getattr(fs, rpc)(request_for(prepared))
    assert err.value.code == code, err.value.message


def test_error_codes_in_binary_codec(fs_proto: FilesystemClientSync, prepared: Path) -> None:
    for rpc, request_for, code in CASES:
        with pytest.raises(ConnectError) as err:
            getattr(fs_proto, rpc)(request_for(prepared))
        assert err.value.code == code, (rpc, err.value.message)
