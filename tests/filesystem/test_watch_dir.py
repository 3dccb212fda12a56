"""WatchDir streams over the wire (§6.6): start first, op mapping and order, recursion,
entry info, keepalives, validation and fd hygiene."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import time
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_pb import FileType
from tests.filesystem.watching import (
    CHMOD,
    CREATE,
    REMOVE,
    RENAME,
    WRITE,
    inotify_fds,
    watching,
)
from tests.waiting import wait_until, wait_until_async

if TYPE_CHECKING:
    from pathlib import Path

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio


async def test_ops_mapped_in_go_order(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir), binary=True) as stream:
        f = workdir / "f.txt"
        f.write_text("x")  # IN_CREATE, IN_MODIFY
        assert await stream.events(2) == [("f.txt", CREATE), ("f.txt", WRITE)]
        f.chmod(0o600)
        assert await stream.events(1) == [("f.txt", CHMOD)]
        f.rename(workdir / "g.txt")
        assert await stream.events(2) == [("f.txt", RENAME), ("g.txt", CREATE)]
        (workdir / "g.txt").unlink()
        assert await stream.events(1) == [("g.txt", REMOVE)]


async def test_file_written_by_a_child_process(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir)) as stream:
        subprocess.run(["touch", str(workdir / "touched")], check=True)
        assert (await stream.events(1))[0] == ("touched", CREATE)


async def test_recursive_reports_nested_names(envd: EnvdProcess, workdir: Path) -> None:
    (workdir / "nested").mkdir()
    async with watching(envd.url, str(workdir), recursive=True) as stream:
        (workdir / "nested" / "file").write_text("x")
        assert await stream.events(2) == [("nested/file", CREATE), ("nested/file", WRITE)]
        (workdir / "fresh").mkdir()
        assert await stream.events(1) == [("fresh", CREATE)]
        (workdir / "fresh" / "in-new-dir").write_text("x")
        assert await stream.events(2) == [("fresh/in-new-dir", CREATE), ("fresh/in-new-dir", WRITE)]


async def test_recursive_mkdir_p_gets_synthetic_creates(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir), recursive=True) as stream:
        subprocess.run(["mkdir", "-p", str(workdir / "a" / "b" / "c")], check=True)
        names = {name for name, kind in await stream.events(3) if kind == CREATE}
        assert names == {"a", "a/b", "a/b/c"}
        (workdir / "a" / "b" / "c" / "leaf").write_text("")
        assert await stream.events(1) == [("a/b/c/leaf", CREATE)]


async def test_not_recursive_ignores_nested(envd: EnvdProcess, workdir: Path) -> None:
    (workdir / "sub").mkdir()
    async with watching(envd.url, str(workdir)) as stream:
        (workdir / "sub" / "hidden").write_text("")
        (workdir / "visible").write_text("")
        assert (await stream.events(1))[0] == ("visible", CREATE)


async def test_include_entry_only_for_create_write_chmod(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir), include_entry=True) as stream:
        f = workdir / "f"
        f.write_text("abc")
        create, write = await stream.messages(2)
        assert create.entry is not None
        assert (create.entry.name, create.entry.type) == ("f", FileType.FILE)
        assert write.entry is not None
        assert write.entry.size == 3
        f.unlink()
        f.write_text("")  # re-created at once: the REMOVE still carries no entry
        removed = await stream.messages(1)
        assert removed[0].type == REMOVE
        assert removed[0].entry is None


async def test_entry_omitted_without_flag(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir)) as stream:
        (workdir / "f").write_text("")
        (event,) = await stream.messages(1)
        assert event.entry is None


async def test_keepalive_at_requested_interval(envd: EnvdProcess, workdir: Path) -> None:
    headers = {"keepalive-ping-interval": "1"}
    opened = time.monotonic()
    async with watching(envd.url, str(workdir), headers=headers) as stream:
        for _ in range(3):  # an idle stream: nothing but keepalives, well before the 90 s default
            message = await stream.next(timeout_s=10)
            assert message.event is not None
            assert message.event.field == "keepalive"
    assert time.monotonic() - opened >= 2.9  # one per interval, not a flood


async def test_bad_keepalive_header_falls_back_to_default(envd: EnvdProcess, workdir: Path) -> None:
    async with contextlib.AsyncExitStack() as streams:
        opened = [
            await streams.enter_async_context(
                watching(envd.url, str(workdir), headers={"keepalive-ping-interval": value})
            )
            for value in ("0", "-5", "soon")
        ]
        # The scenario is an idle stream: longer than the shortest valid interval (1 s), where a
        # zero or negative one would flood it with keepalives.
        await anyio.sleep(1.2)
        (workdir / "f").write_text("")
        for stream in opened:
            message = await stream.next()
            assert message.event is not None
            assert message.event.field == "filesystem"  # no keepalive came first


async def test_watch_missing_file_and_network_guard_errors(
    envd: EnvdProcess, workdir: Path
) -> None:
    (workdir / "file").write_text("")
    cases = {"missing": Code.NOT_FOUND, "file": Code.INVALID_ARGUMENT}
    for name, code in cases.items():
        with pytest.raises(ConnectError) as err:
            async with watching(envd.url, str(workdir / name)):
                pass
        assert err.value.code == code, name


async def test_removed_root_reports_remove_dot(envd: EnvdProcess, workdir: Path) -> None:
    root = workdir / "root"
    root.mkdir()
    async with watching(envd.url, str(root)) as stream:
        root.rmdir()
        assert await stream.events(1) == [(".", REMOVE)]


async def test_disconnect_releases_inotify_fd(envd: EnvdProcess, workdir: Path) -> None:
    await wait_until_async(lambda: inotify_fds(envd) == 0, 5, "earlier tests' streams to close")
    for _ in range(5):
        async with watching(envd.url, str(workdir)):
            assert inotify_fds(envd) == 1
    await wait_until_async(lambda: inotify_fds(envd) == 0, 5, "envd to close the inotify fds")


async def test_burst_of_creates_is_complete(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir), binary=True) as stream:
        for i in range(3000):
            os.close(os.open(workdir / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        events = await stream.events(3000, timeout_s=20)
        assert [name for name, _ in events] == [f"f{i}" for i in range(3000)]


async def test_recursive_follows_renamed_directories(envd: EnvdProcess, workdir: Path) -> None:
    (workdir / "old").mkdir()
    async with watching(envd.url, str(workdir), recursive=True) as stream:
        (workdir / "old").rename(workdir / "new")
        assert await stream.events(2) == [("old", RENAME), ("new", CREATE)]
        (workdir / "new" / "f").write_text("")
        assert await stream.events(1) == [("new/f", CREATE)]


async def test_undecodable_name_in_event(envd: EnvdProcess, workdir: Path) -> None:
    async with watching(envd.url, str(workdir), include_entry=True) as stream:
        with open(os.fsencode(workdir) + b"/bad-\xff", "w"):
            pass
        (event,) = await stream.messages(1)
        assert (event.name, event.type) == ("bad-\ufffd", CREATE)
        assert event.entry is not None
        assert event.entry.name == "bad-\ufffd"


def test_tcp_disconnect_mid_stream_releases_fd(envd: EnvdProcess, workdir: Path) -> None:
    body = json.dumps({"path": str(workdir)}).encode()
    wait_until(lambda: inotify_fds(envd) == 0, 5, "earlier tests' streams to close")
    client = httpx.Client(base_url=envd.url, timeout=10)
    with client.stream(
        "POST",
        "/filesystem.Filesystem/WatchDir",
        content=struct.pack(">BI", 0, len(body)) + body,
        headers={"content-type": "application/connect+json"},
    ) as r:
        chunks = r.iter_raw()  # kept: dropping the iterator would close the response
        assert b'{"start":{}}' in next(chunks)
        assert inotify_fds(envd) == 1
        client.close()  # drops the TCP connection with the stream still open
    wait_until(lambda: inotify_fds(envd) == 0, 5, "envd to close the stream's inotify fd")


async def test_moved_root_reports_rename_then_stops(envd: EnvdProcess, workdir: Path) -> None:
    root = workdir / "root"
    root.mkdir()
    async with watching(envd.url, str(root), headers={"keepalive-ping-interval": "1"}) as stream:
        root.rename(workdir / "elsewhere")
        assert await stream.events(1) == [(".", RENAME)]
        (workdir / "elsewhere" / "unseen").write_text("")
        message = await stream.next(timeout_s=3)
        assert message.event is not None
        assert message.event.field == "keepalive"  # nothing about the moved tree
