"""Helpers for watch tests: a WatchDir stream read with deadlines, and event shorthands."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import anyio
from connectrpc.codec import proto_binary_codec, proto_json_codec

from envd._gen.filesystem.filesystem_connect import FilesystemClient
from envd._gen.filesystem.filesystem_pb import EventType, FilesystemEvent, WatchDirRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from envd._gen.filesystem.filesystem_pb import WatchDirResponse
    from tests.envd_process import EnvdProcess


def inotify_fds(daemon: EnvdProcess) -> int:
    """How many inotify instances the daemon holds open right now."""
    fd_dir = f"/proc/{daemon.pid}/fd"
    count = 0
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(FileNotFoundError):  # closed while we looked
            count += os.readlink(f"{fd_dir}/{fd}") == "anon_inode:inotify"
    return count


class WatchStream:
    """An open WatchDir stream whose messages are read with a deadline each."""

    def __init__(self, messages: AsyncIterator[WatchDirResponse]) -> None:
        self._messages = messages

    async def next(self, timeout_s: float = 5) -> WatchDirResponse:
        with anyio.fail_after(timeout_s):
            return await anext(self._messages)

    async def until_end(self, timeout_s: float = 5) -> None:
        """Read until the stream ends (a ConnectError if it ends in an error)."""
        with anyio.fail_after(timeout_s):
            async for _ in self._messages:
                pass

    async def events(self, count: int, timeout_s: float = 5) -> list[tuple[str, EventType]]:
        """The next `count` filesystem events (keepalives skipped) as (name, type)."""
        return [(e.name, e.type) for e in await self.messages(count, timeout_s)]

    async def messages(self, count: int, timeout_s: float = 5) -> list[FilesystemEvent]:
        found: list[FilesystemEvent] = []
        with anyio.fail_after(timeout_s):
            while len(found) < count:
                message = await anext(self._messages)
                if message.event is not None and message.event.field == "filesystem":
                    assert isinstance(message.event.value, FilesystemEvent)
                    found.append(message.event.value)
        return found


@contextlib.asynccontextmanager
async def watching(
    url: str,
    path: str,
    *,
    recursive: bool = False,
    include_entry: bool = False,
    allow_network_mounts: bool = False,
    headers: Mapping[str, str] | None = None,
    binary: bool = False,
) -> AsyncIterator[WatchStream]:
    """Open WatchDir, check the start message arrives first, and close the stream on exit."""
    codec = proto_binary_codec() if binary else proto_json_codec()
    async with FilesystemClient(url, codec=codec, send_compression=None) as client:
        request = WatchDirRequest(
            path=path,
            recursive=recursive,
            include_entry=include_entry,
            allow_network_mounts=allow_network_mounts,
        )
        messages = client.watch_dir(request, headers=headers)
        stream = WatchStream(messages)
        try:
            first = await stream.next()
            assert first.event is not None
            assert first.event.field == "start"
            yield stream
        finally:
            await messages.aclose()  # type: ignore[attr-defined]  # an async generator


CREATE, WRITE, REMOVE, RENAME, CHMOD = (
    EventType.CREATE,
    EventType.WRITE,
    EventType.REMOVE,
    EventType.RENAME,
    EventType.CHMOD,
)
