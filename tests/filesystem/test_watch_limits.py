"""Watchers at the edges of the machine and the daemon's life: running out of inotify
instances, and streams still open when envd shuts down."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
from typing import TYPE_CHECKING

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import CreateWatcherRequest, RemoveWatcherRequest
from tests.filesystem.fuse_mount import fuse_mount
from tests.filesystem.watching import CREATE, watching
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from envd._gen.filesystem.filesystem_connect import FilesystemClientSync
    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio

# fs.inotify.max_user_instances is 128 on these machines; stop well past it.
MAX_TRIES = 1024


async def test_out_of_inotify_instances_then_recovers(envd: EnvdProcess, workdir: Path) -> None:
    async with contextlib.AsyncExitStack() as streams:
        with pytest.raises(ConnectError) as err:  # noqa: PT012  # opens streams until refused
            for _ in range(MAX_TRIES):
                await streams.enter_async_context(watching(envd.url, str(workdir)))
        assert err.value.code == Code.RESOURCE_EXHAUSTED
        assert "inotify" in err.value.message

    async def watching_works() -> bool:
        try:
            async with watching(envd.url, str(workdir)) as stream:
                (workdir / "after").write_text("")
                assert (await stream.events(1))[0] == ("after", CREATE)
                return True
        except ConnectError:  # the kernel frees instances asynchronously
            return False

    # Every stream is closed: instances are back and watching works again.
    await wait_until_async(watching_works, 5, "a new watch stream to start")


def test_polling_watchers_out_of_instances(fs: FilesystemClientSync, workdir: Path) -> None:
    created: list[str] = []
    try:
        with pytest.raises(ConnectError) as err:  # noqa: PT012  # creates until refused
            for _ in range(MAX_TRIES):
                request = CreateWatcherRequest(path=str(workdir))
                created.append(fs.create_watcher(request).watcher_id)
        assert err.value.code == Code.RESOURCE_EXHAUSTED
    finally:
        for watcher_id in created:
            fs.remove_watcher(RemoveWatcherRequest(watcher_id=watcher_id))
    fs.remove_watcher(RemoveWatcherRequest(watcher_id=fs.create_watcher(request).watcher_id))


async def test_shutdown_ends_open_streams_cleanly(
    envd_factory: Callable[..., EnvdProcess], workdir: Path
) -> None:
    daemon = envd_factory()
    async with watching(daemon.url, str(workdir)) as stream:
        daemon.proc.send_signal(signal.SIGTERM)
        # Ended by envd's shutdown hook: a stream still open when envd cuts the remaining
        # connections ends in an error, which until_end raises.
        await stream.until_end(timeout_s=30)


@pytest.mark.root
async def test_network_filesystem_guard(envd: EnvdProcess, workdir: Path) -> None:
    mount_point = workdir / "fuse"
    mount_point.mkdir()
    with fuse_mount(mount_point):
        with pytest.raises(ConnectError) as err:
            async with watching(envd.url, str(mount_point)):
                pass
        assert err.value.code == Code.INVALID_ARGUMENT
        assert err.value.message == f"cannot watch path on network filesystem: {mount_point}"
        async with watching(envd.url, str(mount_point), allow_network_mounts=True):
            pass  # opted in: the stream starts


def test_stalled_stream_ends_with_overflow_error(envd: EnvdProcess, workdir: Path) -> None:
    # The client stops reading while 300k events happen: more than the socket buffers, envd's
    # 100k-event buffer and the kernel queue can hold together. Events are lost, so the stream
    # must end with an explicit error, after delivering what was read before the overflow.
    a, b = workdir / "a", workdir / "b"
    a.write_text("")
    b.write_text("")
    body = json.dumps({"path": str(workdir)}).encode()
    with (
        httpx.Client(base_url=envd.url, timeout=30) as client,
        client.stream(
            "POST",
            "/filesystem.Filesystem/WatchDir",
            content=struct.pack(">BI", 0, len(body)) + body,
            headers={"content-type": "application/connect+json"},
        ) as r,
    ):
        chunks = r.iter_raw()
        buffer = next(chunks)
        for i in range(300_000):  # alternate, or inotify merges identical consecutive events
            os.utime(a if i % 2 else b, ns=(i, i))
        events, end = 0, None
        while end is None:
            buffer += next(chunks)
            while len(buffer) >= 5 and len(buffer) >= 5 + int.from_bytes(buffer[1:5], "big"):
                flags, size = buffer[0], int.from_bytes(buffer[1:5], "big")
                frame, buffer = buffer[5 : 5 + size], buffer[5 + size :]
                if flags & 0x02:
                    end = json.loads(frame)
                    break
                events += b'"filesystem"' in frame
    assert end["error"]["code"] == "internal"
    assert end["error"]["message"] == "watcher error: fsnotify: queue or buffer overflow"
    assert events > 0
