"""Directory watchers: DirWatcher turns inotify events into the reference envd's filesystem
events (fsnotify semantics); watch_events() frames them as a WatchDir stream; PollingWatchers
keeps the CreateWatcher ones. Path validation lives here too (same for both kinds)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import posixpath
import secrets
import stat
import string
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from anyio import to_thread
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof

from envd._gen.filesystem.filesystem_pb import (
    EventType,
    FilesystemEvent,
    WatchDirResponse,
)
from envd.filesystem import inotify
from envd.filesystem.entries import entry_info, sorted_children
from envd.utf8 import valid_utf8

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from envd._gen.filesystem.filesystem_pb import EntryInfo

log = logging.getLogger("envd.filesystem.watch")

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
_WITH_ENTRY: Final = frozenset({EventType.CREATE, EventType.WRITE, EventType.CHMOD})

# statfs f_type of filesystems Go envd refuses to watch (inotify misses remote changes).
_NETWORK_FS_MAGIC: Final = {
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0x517B: "smb",
    0xFE534D42: "smb2",
    0x65735546: "fuse",
}
_ID_ALPHABET: Final = string.ascii_lowercase + string.digits
_READS_PER_WAKEUP: Final = 16
_EVENTS_PER_CHECKPOINT: Final = 256

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, slots=True)
class FsEvent:
    name: str  # relative to the watched root; "." for the root itself
    type: EventType


class WatcherError(Exception):
    """The watcher failed (inotify queue overflow); no further events will come."""


def _statfs_type(path: str) -> int:
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is the leading long
    if _libc.statfs(os.fsencode(path), buf) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return ctypes.c_long.from_buffer(buf).value


def _check_root(path: str, allow_network_mounts: bool) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConnectError(Code.NOT_FOUND, f"path {path} not found") from None
    except OSError as exc:
        raise ConnectError(Code.INTERNAL, f"error statting path {path}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise ConnectError(Code.INVALID_ARGUMENT, f"path {path} not a directory")
    if allow_network_mounts:
        return
    try:
        fs_type = _statfs_type(path)
    except OSError as exc:
        raise ConnectError(Code.INTERNAL, f"error checking filesystem of {path}: {exc}") from exc
    if fs_type & 0xFFFFFFFF in _NETWORK_FS_MAGIC:
        raise ConnectError(
            Code.INVALID_ARGUMENT, f"cannot watch path on network filesystem: {path}"
        )


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
            WatcherError: the watcher failed and everything before the failure was taken.
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
            WatcherError: the buffer is empty and the watcher has failed.
        """
        if not self._buffer and self._error is not None:
            raise WatcherError(self._error)
        events = list(self._buffer)
        self._buffer.clear()
        if self._paused and self._error is None and not self.closed:
            self._paused = False
            self._loop.add_reader(self._inotify.fd, self._on_readable)
        return events


async def open_watcher(path: str, recursive: bool, allow_network_mounts: bool) -> DirWatcher:
    """Validate `path` as Go envd does and start watching it.

    Raises:
        ConnectError: NOT_FOUND / INVALID_ARGUMENT / INTERNAL per the reference, and
            RESOURCE_EXHAUSTED when no inotify instance can be created.
    """
    await to_thread.run_sync(_check_root, path, allow_network_mounts)
    try:
        watcher = DirWatcher(path, recursive)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED,
                "cannot create watcher: too many inotify instances or open files "
                "(see fs.inotify.max_user_instances); close other watchers and retry",
            ) from exc
        raise ConnectError(Code.INTERNAL, f"error creating watcher: {exc}") from exc
    try:
        await to_thread.run_sync(watcher.add_tree, "")
    except OSError as exc:
        watcher.close()
        raise ConnectError(Code.INTERNAL, f"error adding path {path} to watcher: {exc}") from exc
    except BaseException:
        watcher.close()
        raise
    watcher.start()
    return watcher


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
    """The WatchDir stream: start, then events and keepalives until closed or failed."""
    start: Oneof[Literal["start"], WatchDirResponse.StartEvent]
    start = Oneof("start", WatchDirResponse.StartEvent())
    yield WatchDirResponse(event=start)
    while True:
        try:
            batch = await watcher.next_batch(keepalive_s)
        except WatcherError as exc:
            raise ConnectError(Code.INTERNAL, f"watcher error: {exc}") from exc
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
            ConnectError: NOT_FOUND for an unknown id; INTERNAL (every time) once it failed.
        """
        polled = self._get(watcher_id)
        failure = polled.watcher.failure
        if failure is not None:  # sticky: Go drops the buffer and returns the error every time
            raise ConnectError(Code.INTERNAL, f"watcher error: {failure}")
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
            raise ConnectError(Code.NOT_FOUND, f"watcher with id {watcher_id} not found")
        return polled


@contextlib.contextmanager
def closing_on_exit(watcher: DirWatcher, registry: set[DirWatcher]) -> Iterator[None]:
    """Track an open stream's watcher for shutdown, and release its fd when the stream ends."""
    registry.add(watcher)
    try:
        yield
    finally:
        registry.discard(watcher)
        watcher.close()
