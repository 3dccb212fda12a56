"""The control API as the SDK uses it (normal mode only): create, connect, kill, list, info,
timeouts, pause and resume (a filesystem pause too), the pause at a sandbox's end (`lifecycle`)
and its resume by traffic (`auto_resume`), metrics, a sandbox killed while a command runs, and
the quickstart a README gives a newcomer. Each test makes its own sandboxes and kills them."""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    Sandbox,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

from tests.sdk.python import sandboxes
from tests.sdk.python.mode import normal_only
from tests.sdk.python.sandboxes import create
from tests.waiting import wait_until

pytestmark = normal_only
made = sandboxes.made


def listed_ids(query: SandboxQuery, **options: object) -> list[str]:
    return [s.sandbox_id for s in Sandbox.list(query=query, **options).next_items()]


def test_quickstart() -> None:
    """What a README quickstart does, line for line."""
    sandbox = Sandbox.create()
    try:
        result = sandbox.commands.run("echo hello from $(whoami)")
        assert result.stdout == "hello from user\n"
        sandbox.files.write("hello.txt", "Hello, sandbox!")
        assert sandbox.files.read("hello.txt") == "Hello, sandbox!"

        assert sandbox.pause() is True
        assert not sandbox.is_running()
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.files.read("/home/user/hello.txt") == "Hello, sandbox!"
    finally:
        assert sandbox.kill() is True
    assert not sandbox.is_running()


def test_create_with_metadata_envs_and_a_token(made: list[Sandbox]) -> None:
    tag = uuid.uuid4().hex
    metadata = {"suite": "lifecycle", "tag": tag, "odd key": "a/b&c=d"}
    sandbox = create(made, metadata=metadata, envs={"GREETING": "hi", "EMPTY": ""}, timeout=120)
    assert sandbox.commands.run('echo "$GREETING|${EMPTY-unset}"').stdout == "hi|\n"

    info = sandbox.get_info()
    assert (info.sandbox_id, info.template_id, info.state) == (
        sandbox.sandbox_id,
        "base",
        SandboxState.RUNNING,
    )
    assert info.metadata == metadata
    assert info.end_at - info.started_at == timedelta(seconds=120)
    assert abs((info.started_at - datetime.now(UTC)).total_seconds()) < 60
    assert listed_ids(SandboxQuery(metadata=metadata)) == [sandbox.sandbox_id]

    # Secure: envd refuses a request without the sandbox's token, through the same proxy.
    url = os.environ["E2B_SANDBOX_URL"]
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"}
    for token in ({}, {"X-Access-Token": "0" * 64}):
        refused = httpx.get(
            f"{url}/files", params={"path": "/etc/hostname"}, headers=headers | token
        )
        assert refused.status_code == 401
    assert sandbox.files.read("/etc/hostname")  # the SDK sends the token it was given


def test_connect_extends_only_and_kill_ends_it(made: list[Sandbox]) -> None:
    sandbox = create(made, timeout=300)
    end_at = sandbox.get_info().end_at

    again = Sandbox.connect(sandbox.sandbox_id, timeout=10)
    assert again.commands.run("echo connected").stdout == "connected\n"
    assert again.get_info().end_at == end_at  # never shortened
    Sandbox.connect(sandbox.sandbox_id, timeout=600)
    assert sandbox.get_info().end_at > end_at

    assert Sandbox.kill(sandbox.sandbox_id) is True
    assert Sandbox.kill(sandbox.sandbox_id) is False
    assert not sandbox.is_running()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        sandbox.get_info()


def test_list_filters_and_pages(made: list[Sandbox]) -> None:
    tag = {"tag": uuid.uuid4().hex}
    first = create(made, metadata=tag)
    second = create(made, metadata=tag)
    by_tag = SandboxQuery(metadata=tag)
    assert listed_ids(by_tag) == [second.sandbox_id, first.sandbox_id]  # newest first
    assert listed_ids(by_tag, order="asc") == [first.sandbox_id, second.sandbox_id]

    pages = Sandbox.list(query=by_tag, limit=1)
    assert [s.sandbox_id for s in pages.next_items()] == [second.sandbox_id]
    assert pages.has_next
    assert [s.sandbox_id for s in pages.next_items()] == [first.sandbox_id]
    assert not pages.has_next

    started = second.get_info().started_at
    assert listed_ids(SandboxQuery(metadata=tag, started_after=started)) == [second.sandbox_id]
    later = started + timedelta(seconds=1)
    assert listed_ids(SandboxQuery(metadata=tag, started_after=later)) == []
    assert listed_ids(SandboxQuery(metadata=tag, template="base")) != []
    assert listed_ids(SandboxQuery(metadata=tag, template="unknown-template")) == []

    assert first.pause() is True
    paused = SandboxQuery(metadata=tag, state=[SandboxState.PAUSED])
    running = SandboxQuery(metadata=tag, state=[SandboxState.RUNNING])
    assert listed_ids(paused) == [first.sandbox_id]
    assert listed_ids(running) == [second.sandbox_id]
    [listed] = Sandbox.list(query=paused).next_items()
    assert (listed.state, listed.metadata) == (SandboxState.PAUSED, tag)


def test_set_timeout_expires_the_sandbox(made: list[Sandbox]) -> None:
    sandbox = create(made)
    sandbox.set_timeout(3)
    end_at = sandbox.get_info().end_at
    assert end_at - datetime.now(UTC) < timedelta(seconds=4)
    wait_until(lambda: not sandbox.is_running(), 20, "the sandbox to expire")
    assert datetime.now(UTC) >= end_at
    with pytest.raises(SandboxNotFoundException):
        sandbox.get_info()
    assert Sandbox.kill(sandbox.sandbox_id) is False


def test_pause_resume_and_connect_resumes(made: list[Sandbox]) -> None:
    sandbox = create(made, envs={"KEPT": "yes"})
    sandbox.files.write("note.txt", "before the pause")
    sleeper = sandbox.commands.run("sleep 600", background=True)

    assert sandbox.pause() is True
    assert sandbox.pause() is False  # already paused
    assert not sandbox.is_running()
    assert sandbox.get_info().state == SandboxState.PAUSED

    # Connecting resumes it: same id, token, files, processes and env vars.
    resumed = sandbox.connect()
    assert resumed.is_running()
    assert resumed.get_info().state == SandboxState.RUNNING
    assert resumed.files.read("note.txt") == "before the pause"
    assert sleeper.pid in [p.pid for p in resumed.commands.list()]
    assert resumed.commands.run("echo $KEPT").stdout == "yes\n"

    assert sandbox.pause() is True
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.commands.run("cat note.txt").stdout == "before the pause"


def test_a_filesystem_pause_keeps_files_and_reboots(made: list[Sandbox]) -> None:
    """E2B's test_snapshot_filesystem_only: the marker persisted, a new boot id, the old handle
    still works (the same token); and `on_resume="reboot"` boots a full pause from its files."""
    sandbox = create(made, envs={"KEPT": "yes"})
    sandbox.files.write("/home/user/marker", "persisted")
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    boot_before = sandbox.commands.run(boot_id).stdout
    sandbox.commands.run("sleep 600", background=True)

    assert sandbox.pause(mode="filesystem") is True
    assert not sandbox.is_running()
    assert sandbox.pause(keep_memory=False) is False  # already paused
    assert sandbox.get_info().state == SandboxState.PAUSED

    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.sandbox_id == sandbox.sandbox_id
    assert resumed.is_running()
    assert sandbox.files.read("/home/user/marker") == "persisted"  # the old handle
    boot_after = sandbox.commands.run(boot_id).stdout
    assert boot_after != boot_before
    assert sandbox.commands.run("echo $KEPT").stdout == "yes\n"
    assert [p.cmd for p in sandbox.commands.list() if p.cmd == "sleep"] == []

    assert sandbox.pause() is True
    sandbox.connect(on_resume="reboot")
    assert sandbox.files.read("/home/user/marker") == "persisted"
    assert sandbox.commands.run(boot_id).stdout != boot_after


def paused_at_its_end(sandbox: Sandbox) -> None:
    """Shorten `sandbox`'s life to 1 s and wait until it reads paused (its pause may still run)."""
    sandbox.set_timeout(1)
    wait_until(lambda: sandbox.get_info().state == SandboxState.PAUSED, 120, "the auto-pause")


def test_on_timeout_pause_keeps_the_processes(made: list[Sandbox]) -> None:
    """E2B's test_create with `on_timeout: "pause"`: paused at its end, not running until a
    connect, the same boot (a full pause); `lifecycle` shown running and paused."""
    lifecycle = {"on_timeout": "pause", "auto_resume": False}  # so traffic does not resume it
    sandbox = create(made, lifecycle=lifecycle)
    assert sandbox.get_info().lifecycle == lifecycle
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    boot_before = sandbox.commands.run(boot_id).stdout
    sandbox.commands.run("sleep 600", background=True)
    sleepers = "pgrep -x sleep || true"
    sleeper = wait_until(lambda: sandbox.commands.run(sleepers).stdout, 60, "the sleep to start")

    paused_at_its_end(sandbox)
    assert sandbox.get_info().lifecycle == lifecycle
    assert not sandbox.is_running()
    sandbox.connect()
    assert sandbox.get_info().state == SandboxState.RUNNING
    assert sandbox.commands.run(boot_id).stdout == boot_before
    assert sandbox.commands.run(sleepers).stdout == sleeper


def test_on_timeout_pause_to_the_filesystem_reboots(made: list[Sandbox]) -> None:
    """`on_timeout: {"action": "pause", "mode": "filesystem"}`: the marker kept, a new boot id."""
    sandbox = create(made, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
    assert sandbox.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}
    sandbox.files.write("/home/user/marker", "persisted")
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    boot_before = sandbox.commands.run(boot_id).stdout

    paused_at_its_end(sandbox)
    assert not sandbox.is_running()
    sandbox.connect()
    assert sandbox.files.read("/home/user/marker") == "persisted"
    assert sandbox.commands.run(boot_id).stdout != boot_before
    assert sandbox.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}


def test_auto_resume_wakes_on_http_request(made: list[Sandbox]) -> None:
    """E2B's test of that name: a request to a server in a sandbox paused at its end with
    `auto_resume` wakes it and is answered; then `is_running()` (envd's /health) wakes it too.
    The server answers before the pause (E2B's test pauses after 3 s and hopes it listens)."""
    sandbox = create(made, lifecycle={"on_timeout": "pause", "auto_resume": True})
    sandbox.commands.run("cd /tmp && python3 -m http.server 8000", background=True)
    url, host = os.environ["E2B_SANDBOX_URL"], sandbox.get_host(8000)

    def get() -> httpx.Response:
        return httpx.get(f"{url}/", headers={"Host": host}, timeout=60)

    wait_until(lambda: get().status_code == 200, 30, "the server to answer through the proxy")
    paused_at_its_end(sandbox)
    assert get().status_code == 200
    assert sandbox.get_info().state == SandboxState.RUNNING
    assert sandbox.is_running()

    paused_at_its_end(sandbox)
    assert sandbox.is_running()  # a request to envd's port, which resumes it
    assert sandbox.get_info().state == SandboxState.RUNNING
    assert sandbox.commands.run("echo awake").stdout == "awake\n"


def test_metrics(made: list[Sandbox]) -> None:
    sandbox = create(made)
    created = datetime.now(UTC)
    wait_until(lambda: sandbox.get_metrics() != [], 30, "a first metrics sample")
    [first, *_] = sandbox.get_metrics()
    assert first.cpu_count == 2
    assert 0 <= first.cpu_used_pct <= 100 * first.cpu_count
    assert 0 < first.mem_used < first.mem_total
    assert 0 < first.disk_used < first.disk_total
    assert abs((first.timestamp - created).total_seconds()) < 30
    start, end = created - timedelta(minutes=1), datetime.now(UTC) + timedelta(minutes=1)
    assert sandbox.get_metrics(start=start, end=end) != []
    long_ago = created - timedelta(minutes=40)
    assert sandbox.get_metrics(start=long_ago, end=long_ago + timedelta(minutes=10)) == []


def test_killed_while_a_command_streams(made: list[Sandbox]) -> None:
    sandbox = create(made)
    ticks: list[str] = []

    def kill_on_third_tick(out: str) -> None:
        ticks.append(out)
        if len(ticks) == 3:
            threading.Thread(target=Sandbox.kill, args=(sandbox.sandbox_id,)).start()

    handle = sandbox.commands.run("while true; do echo tick; sleep 0.1; done", background=True)
    # The kill ends the stream: wait() raises instead of following the endless loop.
    with pytest.raises(TimeoutException, match="killed or reached its end of life"):
        handle.wait(on_stdout=kill_on_third_tick)
    assert not sandbox.is_running()


@pytest.mark.anyio
async def test_async_create_run_and_kill() -> None:
    sandbox = await AsyncSandbox.create(metadata={"api": "async"})
    try:
        assert (await sandbox.commands.run("echo async")).stdout == "async\n"
        assert (await sandbox.get_info()).metadata == {"api": "async"}
        assert await sandbox.is_running()
    finally:
        assert await sandbox.kill() is True
    assert not await sandbox.is_running()
