"""CreateWatcher's watchers (Go envd's watch_sync.go): they outlive the request and buffer
events until GetWatcherEvents takes them, or RemoveWatcher (or shutdown) closes them."""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from anyio import to_thread

from envd.filesystem.watch_stream import to_proto
from envd.filesystem.watcher import WatcherFailedError

if TYPE_CHECKING:
    from envd._gen.filesystem.filesystem_pb import FilesystemEvent
    from envd.filesystem.watcher import DirWatcher

_ID_ALPHABET: Final = string.ascii_lowercase + string.digits


class WatcherNotFoundError(Exception):
    """No polled watcher has this id (never created, or removed)."""

    def __init__(self, watcher_id: str) -> None:
        super().__init__(f"watcher with id {watcher_id} not found")


@dataclass(slots=True)
class _Polled:
    watcher: DirWatcher
    include_entry: bool


class PollingWatchers:
    """CreateWatcher's watchers: they outlive the request and buffer until polled."""

    def __init__(self) -> None:
        self._watchers: dict[str, _Polled] = {}

    def add(self, watcher: DirWatcher, include_entry: bool) -> str:
        watcher_id = "w" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))
        self._watchers[watcher_id] = _Polled(watcher, include_entry)
        return watcher_id

    async def drain(self, watcher_id: str) -> list[FilesystemEvent]:
        """Take the buffered events of a watcher.

        Raises:
            WatcherNotFoundError: unknown id.
            WatcherFailedError: every time, once the watcher has failed.
        """
        polled = self._get(watcher_id)
        failure = polled.watcher.failure
        if failure is not None:  # sticky: Go drops the buffer and returns the error every time
            raise WatcherFailedError(failure)
        events = polled.watcher.take()
        if not polled.include_entry:
            return to_proto(events, polled.watcher.root, False)
        return await to_thread.run_sync(to_proto, events, polled.watcher.root, True)

    def remove(self, watcher_id: str) -> None:
        self._get(watcher_id).watcher.close()
        del self._watchers[watcher_id]

    def close_all(self) -> None:
        for polled in self._watchers.values():
            polled.watcher.close()
        self._watchers.clear()

    def _get(self, watcher_id: str) -> _Polled:
        polled = self._watchers.get(watcher_id)
        if polled is None:
            raise WatcherNotFoundError(watcher_id)
        return polled
