"""Lifetime and re-attachment: disconnect, deadline, Connect by pid/tag, exit retention, List,
fan-out to several streams, keepalives, the bounded end with a grandchild holding the pipe."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.process.process_pb import (
    ConnectRequest,
    ListRequest,
    ProcessConfig,
    ProcessSelector,
    SendInputRequest,
    SendSignalRequest,
    Signal,
    StartRequest,
)
from tests.client import AS_USER, frames, start_request
from tests.process.client import (
    Run,
    by_pid,
    by_tag,
    children_of,
    group_alive,
    shell,
    stdin_input,
)
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from envd._gen.process.process_connect import ProcessClient
    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio


async def _started(stream: AsyncIterator[object]) -> int:
    first = await anext(stream)
    event = first.event.event  # type: ignore[attr-defined]
    assert event.field == "start"
    return int(event.value.pid)


async def _rest(stream: AsyncIterator[object], run: Run | None = None) -> Run:
    run = run or Run()
    with anyio.fail_after(30):
        async for response in stream:
            run.add(response.event)  # type: ignore[attr-defined]
    return run


async def _kill(client: ProcessClient, pid: int) -> None:
    await client.send_signal(SendSignalRequest(process=by_pid(pid), signal=Signal.SIGKILL))


async def _group_gone(pgid: int) -> None:
    """Killed members may linger a moment as zombies until init reaps them."""
    await wait_until_async(lambda: not group_alive(pgid), 5, f"process group {pgid} to go")


async def _live_pids(client: ProcessClient) -> set[int]:
    return {p.pid for p in (await client.list(ListRequest())).processes}


async def _unlisted(client: ProcessClient, pid: int, timeout_s: float) -> None:
    async def gone() -> bool:
        return pid not in await _live_pids(client)

    await wait_until_async(gone, timeout_s, f"pid {pid} to leave List")


def _runs_a(pid: int, command: str) -> bool:
    """Whether `pid` has a child running `command` (by its /proc comm)."""
    for child in children_of(pid):
        with contextlib.suppress(FileNotFoundError):  # exited while we looked
            if Path(f"/proc/{child}/comm").read_text().strip() == command:
                return True
    return False


def _comm(pid: int) -> str:
    with contextlib.suppress(FileNotFoundError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


async def test_disconnect_leaves_the_process_running(
    envd: EnvdProcess, client: ProcessClient
) -> None:
    # More output than every buffer on the way holds: the child gets past it only once envd has
    # acted on the disconnect (dropped the stream's subscription, which held the child back).
    # httpx, which reads only when asked: the Connect client reads ahead of its caller.
    script = f"head -c {64 * 1024 * 1024} /dev/zero; exec sleep 30"
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{envd.url}/process.Process/Start", content=start_request(script),
                    headers={"content-type": "application/connect+json"}) as r,
    ):  # fmt: skip
        events = frames(r)
        pid = (await anext(events))["event"]["start"]["pid"]
    # Leaving the block closed the connection mid-stream.
    await wait_until_async(lambda: _comm(pid) != "sh", 30, "the child to get past its output")
    assert _comm(pid) == "sleep"
    assert pid in await _live_pids(client)
    attached = client.connect(ConnectRequest(process=by_pid(pid)))
    assert await _started(attached) == pid
    await _kill(client, pid)
    run = await _rest(attached)
    assert run.end is not None
    assert run.end.status == "signal: killed"


async def test_deadline_kills_the_process(client: ProcessClient) -> None:
    stream = client.start(shell("sleep 30 & sleep 30"), timeout_ms=400)
    pid = await _started(stream)
    with pytest.raises(ConnectError) as caught:
        await _rest(stream)
    assert caught.value.code == Code.DEADLINE_EXCEEDED
    await _unlisted(client, pid, 5)
    replay = await _rest(client.connect(ConnectRequest(process=by_pid(pid))))
    assert replay.end is not None
    assert replay.end.status == "signal: killed"
    await _group_gone(pid)  # the background sleep went with it


async def test_connect_by_pid_and_tag_get_live_output(client: ProcessClient) -> None:
    start = client.start(shell('read x; echo "got $x"', tag="attach-me"))
    pid = await _started(start)
    by_number = client.connect(ConnectRequest(process=by_pid(pid)))
    by_name = client.connect(ConnectRequest(process=by_tag("attach-me")))
    assert await _started(by_number) == pid
    assert await _started(by_name) == pid
    await client.send_input(SendInputRequest(process=by_pid(pid), input=stdin_input(b"hello\n")))
    for stream in (start, by_number, by_name):
        run = await _rest(stream)
        assert run.stdout == b"got hello\n"
        assert run.end is not None
        assert run.end.exit_code == 0


async def test_tag_selects_the_most_recent_live_match(client: ProcessClient) -> None:
    streams = [client.start(shell("sleep 30", tag=tag)) for tag in ("dup", "other", "dup", "x")]
    pids = [await _started(s) for s in streams]
    try:
        attached = client.connect(ConnectRequest(process=by_tag("dup")))
        assert await _started(attached) == pids[2]
        await attached.aclose()  # type: ignore[attr-defined]
    finally:
        for pid in pids:
            await _kill(client, pid)
        for s in streams:
            await _rest(s)


async def test_exit_retained_for_connect_by_pid_and_tag(client: ProcessClient) -> None:
    run = await _rest(client.start(shell("echo bye; exit 7", tag="retained")))
    for selector in (by_pid(run.pid), by_tag("retained")):
        replay = await _rest(client.connect(ConnectRequest(process=selector)))
        assert replay.order == ["start", "end"]
        assert replay.pid == run.pid
        assert replay.end == run.end
        assert replay.end is not None
        assert replay.end.exit_code == 7
    assert run.pid not in await _live_pids(client)


async def test_tag_reuse_replaces_the_retained_exit(client: ProcessClient) -> None:
    await _rest(client.start(shell("exit 1", tag="reused")))
    second = client.start(shell("sleep 30", tag="reused"))
    pid = await _started(second)
    attached = client.connect(ConnectRequest(process=by_tag("reused")))
    assert await _started(attached) == pid  # the live one, not the old exit
    await attached.aclose()  # type: ignore[attr-defined]
    await _kill(client, pid)
    await _rest(second)
    replay = await _rest(client.connect(ConnectRequest(process=by_tag("reused"))))
    assert replay.end is not None
    assert replay.end.status == "signal: killed"


async def test_list_shows_live_processes_with_original_config(client: ProcessClient) -> None:
    config = ProcessConfig(cmd="sleep", args=["30"], envs={"A": "1"}, cwd="~")
    stream = client.start(StartRequest(process=config, tag="listed"))
    pid = await _started(stream)
    try:
        listed = {p.pid: p for p in (await client.list(ListRequest())).processes}
        assert listed[pid].config == config
        assert listed[pid].tag == "listed"
    finally:
        await _kill(client, pid)
    await _rest(stream)
    assert pid not in await _live_pids(client)


@pytest.mark.root
async def test_kill_reaches_the_whole_group_and_empties_list(client: ProcessClient) -> None:
    stream = client.start(
        StartRequest(
            process=ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "sleep 30 && echo done"])
        ),
        headers=AS_USER,
    )
    pid = await _started(stream)
    await wait_until_async(lambda: _runs_a(pid, "sleep"), 10, "bash to start the sleep")
    await _kill(client, pid)
    run = await _rest(stream)
    assert run.end is not None
    assert run.end.status == "signal: killed"
    assert b"done" not in run.stdout
    assert pid not in await _live_pids(client)
    await _group_gone(pid)


@pytest.mark.parametrize(
    ("selector", "code", "message"),
    [
        (by_pid(999_999_999), Code.NOT_FOUND, "process with pid 999999999 not found"),
        (by_tag("no-such-tag"), Code.NOT_FOUND, "process with tag no-such-tag not found"),
        (ProcessSelector(), Code.UNIMPLEMENTED, "invalid input type"),
        (None, Code.UNIMPLEMENTED, "invalid input type"),
    ],
)
async def test_connect_errors(
    client: ProcessClient, selector: ProcessSelector | None, code: Code, message: str
) -> None:
    with pytest.raises(ConnectError) as caught:
        await _rest(client.connect(ConnectRequest(process=selector)))
    assert (caught.value.code, caught.value.message) == (code, message)


async def test_keepalive_at_the_requested_interval(client: ProcessClient) -> None:
    asked = time.monotonic()
    stream = client.start(shell("read x; echo $x"), headers={"keepalive-ping-interval": "1"})
    pid = await _started(stream)
    run = Run()
    with anyio.fail_after(30):  # the default interval (90 s) would not give two by then
        while run.keepalives < 2:
            run.add((await anext(stream)).event)
    assert time.monotonic() - asked >= 2  # one a second, not a flood
    await client.send_input(SendInputRequest(process=by_pid(pid), input=stdin_input(b"x\n")))
    run = await _rest(stream, run)
    assert run.order == ["keepalive", "keepalive", "data", "end"]
    assert run.stdout == b"x\n"


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
async def test_keepalive_header_unusable_means_default(client: ProcessClient, value: str) -> None:
    run = await _rest(
        client.start(shell("sleep 0.3; echo x"), headers={"keepalive-ping-interval": value})
    )
    assert (run.keepalives, run.stdout) == (0, b"x\n")


async def test_end_is_bounded_when_a_grandchild_holds_the_pipe(client: ProcessClient) -> None:
    run = await _rest(client.start(shell("sleep 300 & echo parent done")))
    try:
        assert group_alive(run.pid)  # the end came while the grandchild still held the pipe
        assert run.stdout == b"parent done\n"
        assert run.end is not None
        assert run.end.exit_code == 0
    finally:
        os.killpg(run.pid, signal.SIGKILL)


async def test_every_subscriber_gets_every_byte(client: ProcessClient) -> None:
    start = client.start(shell("read x; seq 1 100000; seq 1 50000 >&2"))
    pid = await _started(start)
    attached = [client.connect(ConnectRequest(process=by_pid(pid))) for _ in range(2)]
    for stream in attached:
        await _started(stream)
    gone = client.connect(ConnectRequest(process=by_pid(pid)))
    await _started(gone)
    await client.send_input(SendInputRequest(process=by_pid(pid), input=stdin_input(b"\n")))
    slow = Run()
    await anext(gone)  # a subscriber that reads one event and leaves
    await gone.aclose()  # type: ignore[attr-defined]

    async def slowly(stream: AsyncIterator[object]) -> Run:
        async for response in stream:  # a slow reader back-pressures, never loses data
            slow.add(response.event)  # type: ignore[attr-defined]
            if len(slow.order) < 20:
                await anyio.sleep(0.01)
        return slow

    runs = [await _rest(start), await _rest(attached[0])]
    runs.append(await slowly(attached[1]))
    expected_out = "".join(f"{i}\n" for i in range(1, 100001)).encode()
    expected_err = "".join(f"{i}\n" for i in range(1, 50001)).encode()
    for run in runs:
        assert (run.stdout, run.stderr) == (expected_out, expected_err)
        assert run.end is not None
        assert run.end.exit_code == 0


async def test_output_without_subscribers_is_discarded(
    envd: EnvdProcess, client: ProcessClient
) -> None:
    before = envd.rss_bytes()
    stream = client.start(shell("head -c 200000000 /dev/zero; echo end"))
    pid = await _started(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    await _unlisted(client, pid, 30)  # the child is never blocked by the missing reader
    replay = await _rest(client.connect(ConnectRequest(process=by_pid(pid))))
    assert replay.end is not None
    assert replay.end.exit_code == 0
    assert envd.rss_bytes() - before < 20 * 1024 * 1024
