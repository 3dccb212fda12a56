"""The WatchDir stream (Go envd's watch.go): a start event, then the watcher's events
and keepalives until the watcher is closed or fails."""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from typing import TYPE_CHECKING, Final, Literal

from protobuf import Oneof

from envd._gen.filesystem.filesystem_pb import (
    EventType,
    FilesystemEvent,
    WatchDirResponse,
)
from envd.filesystem.entries import entry_info
from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from envd._gen.filesystem.filesystem_pb import EntryInfo
    from envd.filesystem.watcher import DirWatcher, FsEvent

_WITH_ENTRY: Final = frozenset({EventType.CREATE, EventType.WRITE, EventType.CHMOD})
_EVENTS_PER_CHECKPOINT: Final = 256


def _entry_or_none(path: str) -> EntryInfo | None:
    try:
        return entry_info(path)
    except OSError:  # gone (or unreadable) by delivery time: Go omits the entry
        return None


def _to_proto(event: FsEvent, root: str, include_entry: bool) -> FilesystemEvent:
    """One protobuf event; CREATE/WRITE/CHMOD carry a fresh EntryInfo when asked (blocking)."""
    message = FilesystemEvent(name=valid_utf8(event.name), type=event.type)
    if include_entry and event.type in _WITH_ENTRY:
        path = root if event.name == "." else posixpath.join(root, event.name)
        entry = _entry_or_none(path)
        if entry is not None:
            message.entry = entry
    return message


def to_proto(events: Iterable[FsEvent], root: str, include_entry: bool) -> list[FilesystemEvent]:
    return [_to_proto(event, root, include_entry) for event in events]


async def watch_events(
    watcher: DirWatcher, include_entry: bool, keepalive_s: float
) -> AsyncIterator[WatchDirResponse]:
    """The WatchDir stream: start, then events and keepalives until closed or failed.

    Raises:
        WatcherFailedError: the watcher failed (after every event before the failure).
    """
    start: Oneof[Literal["start"], WatchDirResponse.StartEvent]
    start = Oneof("start", WatchDirResponse.StartEvent())
    yield WatchDirResponse(event=start)
    while True:
        batch = await watcher.next_batch(keepalive_s)  # WatcherFailedError ends the stream
        if batch is None:
            keepalive: Oneof[Literal["keepalive"], WatchDirResponse.KeepAlive]
            keepalive = Oneof("keepalive", WatchDirResponse.KeepAlive())
            yield WatchDirResponse(event=keepalive)
            continue
        if not batch and watcher.closed:
            return
        for sent, fs_event in enumerate(batch, 1):
            message = _to_proto(fs_event, watcher.root, include_entry)
            event: Oneof[Literal["filesystem"], FilesystemEvent] = Oneof("filesystem", message)
            yield WatchDirResponse(event=event)
            if sent % _EVENTS_PER_CHECKPOINT == 0:
                # Writes to a fast client never suspend; let other requests run during bursts.
                await asyncio.sleep(0)


@contextlib.contextmanager
def closing_on_exit(watcher: DirWatcher, registry: set[DirWatcher]) -> Iterator[None]:
    """Track an open stream's watcher for shutdown, and release its fd when the stream ends."""
    registry.add(watcher)
    try:
        yield
    finally:
        registry.discard(watcher)
        watcher.close()
