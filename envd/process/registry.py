"""ProcessRegistry: every process started through this daemon, found by pid or tag; exit
retention; the tasks that pump their output; and their shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from envd.memory import keep_buffers_on_heap
from envd.process.handle import ProcessHandle
from envd.process.spawn import spawn
from envd.process.spawn_helper import ensure_helper
from envd.process.streams import MAX_EVENT_BYTES

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from envd._gen.process.process_pb import ProcessConfig, ProcessEvent, ProcessSelector
    from envd.process.broadcast import Subscription
    from envd.process.handle import Chunk
    from envd.process.spawn import SpawnRequest

log = logging.getLogger("envd.process")

EXIT_RETENTION_S: Final = 30.0  # Go 0.6.12: a Connect after the exit still gets start + end
STOP_GRACE_S: Final = 2.0  # SIGTERM → SIGKILL on shutdown
STREAMS_END_WAIT_S: Final = 1.0


class EmptySelectorError(Exception):
    """A process selector with neither a pid nor a tag."""

    def __init__(self) -> None:
        super().__init__("invalid input type")


class ProcessNotFoundError(Exception):
    """No process started by this daemon has that pid or tag (or its exit is forgotten)."""


@dataclass(frozen=True, slots=True)
class RetainedExit:
    pid: int
    tag: str | None
    end: ProcessEvent.EndEvent


class ProcessRegistry:
    def __init__(self) -> None:
        self._live: dict[int, ProcessHandle] = {}  # insertion order = start order
        self._retained_by_pid: dict[int, RetainedExit] = {}
        self._retained_by_tag: dict[str, RetainedExit] = {}
        # Each child's pump task, until its pipes reach EOF (a grandchild may hold them after
        # the end event): shutdown stops these groups too.
        self._tasks: dict[asyncio.Task[None], ProcessHandle] = {}
        self._streams: set[Subscription[Chunk]] = set()
        self._no_streams = asyncio.Event()
        self._helper: str | None = None
        self._stopping: asyncio.Task[None] | None = None

    async def start(
        self, request: SpawnRequest, config: ProcessConfig, tag: str | None
    ) -> tuple[ProcessHandle, Subscription[Chunk]]:
        """Spawn, register, and subscribe the caller before any output is read.

        Raises:
            SpawnError: the child could not be started.
        """
        handle = ProcessHandle(await spawn(request, self._helper), config, tag)
        self._forget_retained(handle.pid, tag)
        self._live[handle.pid] = handle
        subscription = self.subscribe(handle)
        task = asyncio.create_task(handle.run(self._on_end))
        self._tasks[task] = handle
        task.add_done_callback(self._forget_task)
        return handle, subscription

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    def subscribe(self, handle: ProcessHandle) -> Subscription[Chunk]:
        subscription = handle.output.subscribe()
        self._streams.add(subscription)
        self._no_streams.clear()
        return subscription

    def unsubscribe(self, subscription: Subscription[Chunk]) -> None:
        subscription.stop()
        self._streams.discard(subscription)
        if not self._streams:
            self._no_streams.set()

    def _on_end(self, handle: ProcessHandle) -> None:
        self._live.pop(handle.pid, None)
        retained = RetainedExit(handle.pid, handle.tag, handle.end.result())
        self._retained_by_pid[handle.pid] = retained
        if handle.tag is not None:
            self._retained_by_tag[handle.tag] = retained
        asyncio.get_running_loop().call_later(EXIT_RETENTION_S, self._evict, retained)

    def _evict(self, retained: RetainedExit) -> None:
        # Only this entry: a newer exit with the same pid or tag has its own timer.
        if self._retained_by_pid.get(retained.pid) is retained:
            del self._retained_by_pid[retained.pid]
        if retained.tag is not None and self._retained_by_tag.get(retained.tag) is retained:
            del self._retained_by_tag[retained.tag]

    def _forget_retained(self, pid: int, tag: str | None) -> None:
        self._retained_by_pid.pop(pid, None)
        if tag is not None:
            self._retained_by_tag.pop(tag, None)

    def live(self) -> list[ProcessHandle]:
        return list(self._live.values())

    def find(
        self, selector: ProcessSelector | None, *, live_only: bool = False
    ) -> ProcessHandle | RetainedExit:
        """The live process (by tag: the most recently started live match), else its retained
        exit unless `live_only` (the RPCs that act on a running process).

        Raises:
            EmptySelectorError: neither pid nor tag.
            ProcessNotFoundError: nothing matches.
        """
        which = selector.selector if selector is not None else None
        if which is None:
            raise EmptySelectorError
        found: ProcessHandle | RetainedExit | None
        if which.field == "pid":
            found = self._live.get(which.value)
            retained = self._retained_by_pid.get(which.value)
        else:
            # Go stops scanning at the first live process with another tag; scan them all.
            found = next((h for h in reversed(self._live.values()) if h.tag == which.value), None)
            retained = self._retained_by_tag.get(which.value)
        if found is None and not live_only:
            found = retained
        if found is None:
            raise ProcessNotFoundError(f"process with {which.field} {which.value} not found")
        return found

    def find_live(self, selector: ProcessSelector | None) -> ProcessHandle:
        found = self.find(selector, live_only=True)
        assert isinstance(found, ProcessHandle)  # noqa: S101  # live_only never returns an exit
        return found

    async def end_streams(self) -> None:
        """Shutdown hook: every open Start/Connect stream ends cleanly (end-of-stream, no end
        event), before the server starts cutting connections."""
        for subscription in list(self._streams):
            subscription.stop()
        if self._streams:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STREAMS_END_WAIT_S):
                    await self._no_streams.wait()

    async def begin_stopping_children(self) -> None:
        """Shutdown hook, after end_streams: signal every child now, so their grace period runs
        while connections drain rather than after."""
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop_children())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The lifespan: on exit, stop every child (SIGTERM to its group, SIGKILL after a grace
        period) so a restart leaves no orphans, then cancel the remaining pumps."""
        keep_buffers_on_heap(MAX_EVENT_BYTES)
        self._helper = await asyncio.to_thread(ensure_helper)
        log.debug("spawn helper: %s", self._helper or "none (Python fallback)")
        try:
            yield
        finally:
            if self._stopping is not None:
                await self._stopping
            await self._stop_children()  # any started during the drain

    async def _stop_children(self) -> None:
        if self._tasks:
            log.info("stopping %d process groups", len(self._tasks))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for handle in list(self._tasks.values()):
                handle.kill_quietly(sig)
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=STOP_GRACE_S)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
