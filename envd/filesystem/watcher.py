"""DirWatcher: inotify events turned into the reference envd's filesystem events (fsnotify
semantics), for one directory or a whole tree; and open_watcher(), which validates the path as
Go envd does and starts one. Both WatchDir streams (watch_stream.py) and CreateWatcher's polled
watchers (polling.py) use it."""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import stat
from collections import deque
from dataclasses import dataclass
from typing import Final

from anyio import to_thread

from envd._gen.filesystem.filesystem_pb import EventType
from envd.filesystem import inotify
from envd.filesystem.entries import sorted_children
from envd.filesystem.mounts import network_filesystem

# Events are buffered up to this many per watcher; past it envd stops reading the inotify fd,
# so the kernel queue fills and overflows, which the watcher then reports as an error.
MAX_BUFFERED_EVENTS: Final = 100_000

# fsnotify's watch mask (Go envd uses fsnotify): no IN_CLOSE_WRITE, IN_OPEN or IN_ACCESS.
_WATCH_MASK: Final = (
    inotify.IN_CREATE
    | inotify.IN_MOVED_TO
    | inotify.IN_MODIFY
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVE_SELF
    | inotify.IN_ATTRIB
)
# One inotify event may carry several ops; Go envd emits them in this order.
_OPS_IN_ORDER: Final = (
    (inotify.IN_CREATE | inotify.IN_MOVED_TO, EventType.CREATE),
    (inotify.IN_MOVED_FROM | inotify.IN_MOVE_SELF, EventType.RENAME),
    (inotify.IN_ATTRIB, EventType.CHMOD),
    (inotify.IN_MODIFY, EventType.WRITE),
    (inotify.IN_DELETE | inotify.IN_DELETE_SELF, EventType.REMOVE),
)

_READS_PER_WAKEUP: Final = 16


@dataclass(frozen=True, slots=True)
class FsEvent:
    name: str  # relative to the watched root; "." for the root itself
    type: EventType


class WatchPathNotFoundError(Exception):
    """The path to watch does not exist."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path} not found")


class WatchPathNotADirectoryError(Exception):
    """The path to watch is not a directory (only directories can be watched)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path} not a directory")


class NetworkMountError(Exception):
    """The path is on a network filesystem, where inotify misses remote changes."""

    def __init__(self, path: str) -> None:
        super().__init__(f"cannot watch path on network filesystem: {path}")


class InotifyLimitError(Exception):
    """No inotify instance can be created: the per-user limit or the fd limit is reached."""

    def __init__(self) -> None:
        super().__init__(
            "cannot create watcher: too many inotify instances or open files "
            "(see fs.inotify.max_user_instances); close other watchers and retry"
        )


class WatchSetupError(Exception):
    """Watching could not start: stat, statfs, inotify or the first watch failed."""


class WatcherFailedError(Exception):
    """The watcher failed (inotify queue overflow); no further events will come."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"watcher error: {reason}")


def _check_root(path: str, allow_network_mounts: bool) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise WatchPathNotFoundError(path) from None
    except OSError as exc:
        raise WatchSetupError(f"error statting path {path}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise WatchPathNotADirectoryError(path)
    if allow_network_mounts:
        return
    try:
        network = network_filesystem(path)
    except OSError as exc:
        raise WatchSetupError(f"error checking filesystem of {path}: {exc}") from exc
    if network is not None:
        raise NetworkMountError(path)


class DirWatcher:
    """inotify watches on a directory (and, if recursive, every directory below it)."""

    def __init__(self, root: str, recursive: bool) -> None:
        self.root = root
        self.recursive = recursive
        self._inotify = inotify.Inotify()
        self._dirs: dict[int, str] = {}  # wd → directory relative to root ("" is the root)
        self._buffer: deque[FsEvent] = deque()
        # Names announced by a synthetic CREATE whose real CREATE may still be queued: an
        # entry made between add_watch and the walk of a new directory is seen by both.
        self._synthetic: set[str] = set()
        self._error: str | None = None
        self._wakeup = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._paused = False
        self.closed = False

    @property
    def failure(self) -> str | None:
        """Why the watcher stopped (inotify queue overflow), or None while it works."""
        return self._error

    def add_tree(self, rel: str, on_existing: list[FsEvent] | None = None) -> None:
        """Watch directory `rel` (and its subdirectories if recursive); blocking.

        Entries already inside are appended to `on_existing` as CREATEs, parents first (the
        `mkdir -p` case). Only the root's failure is raised; unreadable subdirectories are
        skipped, as in Go. Iterative: depth is bounded by the filesystem, not the interpreter.
        """
        pending = [rel]
        while pending:
            dir_rel = pending.pop()
            path = posixpath.join(self.root, dir_rel) if dir_rel else self.root
            try:
                self._dirs[self._inotify.add_watch(path, _WATCH_MASK)] = dir_rel
            except OSError:
                if not dir_rel:
                    raise
                continue
            if not self.recursive:
                return
            try:
                children = sorted_children(path)
            except OSError:
                continue
            subdirs = []
            for child in children:
                child_rel = posixpath.join(dir_rel, child.name) if dir_rel else child.name
                if on_existing is not None:
                    on_existing.append(FsEvent(child_rel, EventType.CREATE))
                    self._synthetic.add(child_rel)
                if child.is_dir(follow_symlinks=False):
                    subdirs.append(child_rel)
            pending.extend(reversed(subdirs))

    def start(self) -> None:
        self._loop.add_reader(self._inotify.fd, self._on_readable)

    def close(self) -> None:
        """Release the inotify fd now and wake any waiter; idempotent."""
        if self.closed:
            return
        self.closed = True
        if not self._paused and self._error is None:
            self._loop.remove_reader(self._inotify.fd)
        self._inotify.close()
        self._wakeup.set()

    def _on_readable(self) -> None:
        # Bounded work per callback so a storm of events cannot starve other requests.
        for _ in range(_READS_PER_WAKEUP):
            if self._error is not None or len(self._buffer) >= MAX_BUFFERED_EVENTS:
                self._loop.remove_reader(self._inotify.fd)
                self._paused = True
                break
            raw_events = self._inotify.read_events()
            if not raw_events:
                # Every event queued before the last synthetic walk has now been seen.
                self._synthetic.clear()
                break
            for raw in raw_events:
                self._translate(raw)
        self._wakeup.set()

    def _forget_under(self, rel: str) -> None:
        """Stop watching directory `rel` and everything below it ("" is the whole tree)."""
        for wd, dir_rel in list(self._dirs.items()):
            if not rel or dir_rel == rel or dir_rel.startswith(rel + "/"):
                del self._dirs[wd]
                self._inotify.remove_watch(wd)

    def _translate(self, raw: inotify.RawEvent) -> None:
        if raw.mask & inotify.IN_Q_OVERFLOW:
            self._error = "fsnotify: queue or buffer overflow"
            return
        if raw.mask & inotify.IN_IGNORED:
            self._dirs.pop(raw.wd, None)
            return
        dir_rel = self._dirs.get(raw.wd)
        if dir_rel is None:  # a watch already forgotten
            return
        if not raw.name and dir_rel:
            # A subdirectory's own events: its parent reports the same change by name
            # (fsnotify skips these duplicates too). A moved directory's path is stale.
            if raw.mask & inotify.IN_MOVE_SELF:
                self._forget_under(dir_rel)
            return
        rel = posixpath.join(dir_rel, os.fsdecode(raw.name)) if raw.name else ""
        created = raw.mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO)
        if rel in self._synthetic:
            self._synthetic.discard(rel)
            if created:  # already announced (and watched) by the walk
                return
        for mask, event_type in _OPS_IN_ORDER:
            if raw.mask & mask:
                self._buffer.append(FsEvent(rel or ".", event_type))
        if not rel and raw.mask & inotify.IN_MOVE_SELF:
            # The root moved: names would be wrong from now on; fsnotify drops the watch too.
            self._forget_under("")
            return
        if not (self.recursive and raw.mask & inotify.IN_ISDIR and rel):
            return
        if raw.mask & inotify.IN_MOVED_FROM:
            # A moved-away tree keeps its watches under stale names: drop them. (A deleted
            # directory's watch goes by itself, with IN_IGNORED, so IN_DELETE needs no scan.)
            self._forget_under(rel)
        if created:
            existing: list[FsEvent] = []
            self.add_tree(rel, existing)
            self._buffer.extend(existing)

    async def next_batch(self, timeout_s: float) -> list[FsEvent] | None:
        """Buffered events (waiting up to `timeout_s` for some); None on timeout, [] once
        closed.

        Raises:
            WatcherFailedError: the watcher failed and everything before the failure was taken.
        """
        if not self._buffer and self._error is None and not self.closed:
            self._wakeup.clear()
            try:
                async with asyncio.timeout(timeout_s):  # no extra task, unlike wait_for
                    await self._wakeup.wait()
            except TimeoutError:
                return None
        return self.take()

    def take(self) -> list[FsEvent]:
        """Every buffered event, emptying the buffer.

        Raises:
            WatcherFailedError: the buffer is empty and the watcher has failed.
        """
        if not self._buffer and self._error is not None:
            raise WatcherFailedError(self._error)
        events = list(self._buffer)
        self._buffer.clear()
        if self._paused and self._error is None and not self.closed:
            self._paused = False
            self._loop.add_reader(self._inotify.fd, self._on_readable)
        return events


async def open_watcher(path: str, recursive: bool, allow_network_mounts: bool) -> DirWatcher:
    """Validate `path` as Go envd does and start watching it.

    Raises:
        WatchPathNotFoundError, WatchPathNotADirectoryError, NetworkMountError: a path that
            cannot be watched.
        InotifyLimitError: no inotify instance can be created.
        WatchSetupError: any other failure.
    """
    await to_thread.run_sync(_check_root, path, allow_network_mounts)
    try:
        watcher = DirWatcher(path, recursive)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise InotifyLimitError from exc
        raise WatchSetupError(f"error creating watcher: {exc}") from exc
    try:
        await to_thread.run_sync(watcher.add_tree, "")
    except OSError as exc:
        watcher.close()
        raise WatchSetupError(f"error adding path {path} to watcher: {exc}") from exc
    except BaseException:
        watcher.close()
        raise
    watcher.start()
    return watcher
