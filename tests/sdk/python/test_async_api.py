"""AsyncSandbox: the async files, watch stream, commands and PTY APIs through the real SDK."""

from __future__ import annotations

import asyncio
import io

import pytest
from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileType,
    NotFoundException,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.watch_handle import FilesystemEvent, FilesystemEventType

from tests.waiting import wait_until_async

pytestmark = pytest.mark.anyio


async def test_files_round_trip(async_sandbox: AsyncSandbox, workdir: str) -> None:
    files = async_sandbox.files
    await files.write(f"{workdir}/a.txt", "text")
    await files.write(f"{workdir}/b.bin", b"\x00\x01\xff")
    await files.write(f"{workdir}/c.bin", io.BytesIO(b"from a file object"))
    await files.write(f"{workdir}/z.txt", "zipped " * 1000, gzip=True)
    await files.write_files(
        [
            {"path": f"{workdir}/m/1.txt", "data": "one"},
            {"path": f"{workdir}/m/2.txt", "data": "two"},
        ]
    )

    assert await files.read(f"{workdir}/a.txt") == "text"
    assert await files.read(f"{workdir}/b.bin", format="bytes") == b"\x00\x01\xff"
    stream = await files.read(f"{workdir}/c.bin", format="stream")
    assert b"".join([chunk async for chunk in stream]) == b"from a file object"
    assert await files.read(f"{workdir}/z.txt", gzip=True) == "zipped " * 1000
    assert [e.name for e in await files.list(f"{workdir}/m")] == ["1.txt", "2.txt"]
    assert [e.path for e in await files.list(workdir, depth=2)][-3:] == [
        f"{workdir}/m/1.txt",
        f"{workdir}/m/2.txt",
        f"{workdir}/z.txt",
    ]

    assert await files.exists(f"{workdir}/a.txt")
    assert (await files.get_info(f"{workdir}/m")).type == FileType.DIR
    assert await files.make_dir(f"{workdir}/new/dir") is True
    await files.rename(f"{workdir}/a.txt", f"{workdir}/new/a.txt")
    await files.remove(f"{workdir}/m")
    assert not await files.exists(f"{workdir}/m")
    assert not await files.exists(f"{workdir}/a.txt")
    with pytest.raises(NotFoundException):
        await files.read(f"{workdir}/a.txt")
    with pytest.raises(NotFoundException):
        await files.get_info(f"{workdir}/a.txt")


async def test_watch_dir_stream(async_sandbox: AsyncSandbox, workdir: str) -> None:
    flat: list[FilesystemEvent] = []
    deep: list[FilesystemEvent] = []
    await async_sandbox.commands.run(f"mkdir {workdir}/sub")
    flat_handle = await async_sandbox.files.watch_dir(workdir, on_event=flat.append)
    deep_handle = await async_sandbox.files.watch_dir(
        workdir, on_event=deep.append, recursive=True, include_entry=True
    )
    try:
        await async_sandbox.files.write(f"{workdir}/w.txt", "data")
        await wait_until_async(lambda: len(flat) >= 3, 15, "three events on the flat watch")
        assert (flat[0].type, flat[0].name) == (FilesystemEventType.CREATE, "w.txt")
        assert {e.type for e in flat} == {
            FilesystemEventType.CREATE,
            FilesystemEventType.CHMOD,
            FilesystemEventType.WRITE,
        }
        created = next(e for e in deep if e.type == FilesystemEventType.CREATE)
        assert created.entry is not None
        assert created.entry.path == f"{workdir}/w.txt"

        flat.clear()
        await async_sandbox.commands.run(f"chmod 600 {workdir}/w.txt", user="root")
        await async_sandbox.files.rename(f"{workdir}/w.txt", f"{workdir}/r.txt")
        await async_sandbox.files.remove(f"{workdir}/r.txt")
        await wait_until_async(lambda: len(flat) >= 4, 15, "four events on the flat watch")
        assert [(e.type, e.name) for e in flat] == [
            (FilesystemEventType.CHMOD, "w.txt"),
            (FilesystemEventType.RENAME, "w.txt"),
            (FilesystemEventType.CREATE, "r.txt"),
            (FilesystemEventType.REMOVE, "r.txt"),
        ]

        await async_sandbox.files.write(f"{workdir}/sub/nested.txt", "x")
        await wait_until_async(
            lambda: any(e.name == "sub/nested.txt" for e in deep),
            15,
            "sub/nested.txt on the deep watch",
        )
        assert not any(e.name == "sub/nested.txt" for e in flat)
    finally:
        await flat_handle.stop()
        await deep_handle.stop()
    with pytest.raises(NotFoundException):
        await async_sandbox.files.watch_dir(f"{workdir}/missing", on_event=flat.append)


async def test_commands(async_sandbox: AsyncSandbox, workdir: str) -> None:
    commands = async_sandbox.commands
    out: list[str] = []
    err: list[str] = []
    result = await commands.run(
        "echo $A; pwd; echo oops >&2",
        envs={"A": "from-env"},
        cwd=workdir,
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert result.stdout == f"from-env\n{workdir}\n"
    assert "".join(out) == result.stdout
    assert "".join(err) == "oops\n"
    assert (await commands.run("whoami", user="user")).stdout == "user\n"

    with pytest.raises(CommandExitException) as caught:
        await commands.run("exit 7")
    assert caught.value.exit_code == 7

    handle = await commands.run("cat", background=True, stdin=True)
    assert handle.pid in [p.pid for p in await commands.list()]
    await handle.send_stdin("piped\n")
    await handle.close_stdin()
    assert (await handle.wait()).stdout == "piped\n"

    # Killed early, so run as `user` (see test_commands.KILLED_EARLY_USER).
    sleeper = await commands.run("sleep 30", background=True, user="user")
    again = await commands.connect(sleeper.pid)
    assert await commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException) as killed:
        await again.wait()
    assert killed.value.exit_code == -1
    assert await commands.kill(sleeper.pid) is False
    with pytest.raises(NotFoundException):
        await commands.connect(999_999)

    with pytest.raises(TimeoutException):
        await commands.run("sleep 10", timeout=1, user="user")


async def test_concurrent_commands_and_file_writes(
    async_sandbox: AsyncSandbox, workdir: str
) -> None:
    async def one(i: int) -> None:
        path = f"{workdir}/c{i}.txt"
        await async_sandbox.files.write(path, f"file {i}")
        result = await async_sandbox.commands.run(f"cat {path}; echo; echo {i} >&2", user="user")
        assert (result.stdout, result.stderr) == (f"file {i}\n", f"{i}\n")

    async with asyncio.timeout(45):
        await asyncio.gather(*(one(i) for i in range(12)))


async def test_pty(async_sandbox: AsyncSandbox) -> None:
    output = bytearray()
    terminal = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=output.extend)
    await async_sandbox.pty.send_stdin(terminal.pid, b"stty size; echo a-$((40+2))\n")
    await wait_until_async(lambda: b"a-42" in output, 15, "the shell's answer")
    assert b"24 80" in output
    await async_sandbox.pty.resize(terminal.pid, PtySize(rows=50, cols=100))
    await async_sandbox.pty.send_stdin(terminal.pid, b"stty size; exit 0\n")
    result = await terminal.wait()
    assert result.exit_code == 0
    assert b"50 100" in output
