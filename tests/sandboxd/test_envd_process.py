"""Commands sandboxd runs in its own sandboxes through envd's process.Process/Start
(sandboxd/guest/commands.py), against a real sandbox booted from the base template: output as it
comes, exit codes, user, cwd and env, refusals with envd's words, a start command that keeps
running after `start` returns, and ready commands."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import CommandError, CommandTimedOut, NotReady
from sandboxd.guest.client import EnvdClient, EnvdUnreachable
from sandboxd.guest.commands import (
    LOGIN_BASH,
    POSIX_SH,
    Command,
    detect_shell,
    run,
    start,
    wait_ready,
)
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import BootImage
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Mapping
    from pathlib import Path

    from sandboxd.runtime.nspawn.box import NspawnBox

pytestmark = [pytest.mark.root, pytest.mark.anyio]


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory, base_template: Path, cgroup_parent: str
) -> Iterator[NspawnBox]:
    """One sandbox for the module: every test's commands leave it as a fresh boot would be,
    except for files under /tmp and the servers on their own ports."""
    runtime = NspawnRuntime(
        tmp_path_factory.mktemp("envd-process") / "sandboxes",
        cgroup_parent=cgroup_parent,
        probe=envd_ready,
        guest_unit=ENVD_UNIT,
    )
    booted = asyncio.run(runtime.boot(uuid.uuid4().hex[:16], BootImage((base_template,))))
    try:
        yield booted
    finally:
        asyncio.run(runtime.kill(booted))


@pytest.fixture
async def client(box: NspawnBox) -> AsyncIterator[EnvdClient]:
    envd = EnvdClient()
    envd.reach(box.id, box.dialer)
    yield envd
    await envd.aclose()


class Output:
    """What a command printed, as `on_output` saw it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []

    def __call__(self, kind: str, data: bytes) -> None:
        self.events.append((kind, data))

    def of(self, kind: str) -> bytes:
        return b"".join(data for k, data in self.events if k == kind)


def sh(
    script: str, *, user: str = "root", cwd: str | None = None, env: Mapping[str, str] | None = None
) -> Command:
    return Command(script, LOGIN_BASH, user=user, cwd=cwd, env=env or {})


async def test_output_goes_to_its_stream_in_order(client: EnvdClient, box: NspawnBox) -> None:
    out = Output()
    script = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done"
    assert await run(client, box.id, sh(script), on_output=out) == 0
    assert out.of("stdout") == b"".join(b"out%d\n" % i for i in range(1, 201))
    assert out.of("stderr") == b"".join(b"err%d\n" % i for i in range(1, 201))
    assert {kind for kind, _ in out.events} == {"stdout", "stderr"}


async def test_exit_codes(client: EnvdClient, box: NspawnBox) -> None:
    assert await run(client, box.id, sh("true")) == 0
    assert await run(client, box.id, sh("echo failing; exit 3")) == 3
    # Killed by a signal: envd's -1 (Go's ProcessState), no exit status.
    assert await run(client, box.id, sh("kill -KILL $$")) == -1


async def test_env_cwd_and_shell(client: EnvdClient, box: NspawnBox) -> None:
    out = Output()
    command = sh('echo "$GREETING" && pwd && echo "$0"', env={"GREETING": "hi there"}, cwd="/etc")
    assert await run(client, box.id, command, on_output=out) == 0
    assert out.of("stdout") == b"hi there\n/etc\n/bin/bash\n"
    out = Output()
    posix = Command('echo "$0"; test -z "$BASH_VERSION"', POSIX_SH)
    assert await run(client, box.id, posix, on_output=out) == 0
    assert out.of("stdout") == b"/bin/sh\n"
    assert await detect_shell(client, box.id) == LOGIN_BASH


async def test_user_and_root(client: EnvdClient, box: NspawnBox) -> None:
    as_user, as_root = Output(), Output()
    assert await run(client, box.id, sh("id -u; pwd", user="user"), on_output=as_user) == 0
    assert await run(client, box.id, sh("id -u; pwd"), on_output=as_root) == 0
    uid, home = as_user.of("stdout").split()
    assert int(uid) >= 1000
    assert home == b"/home/user"  # envd's default cwd is the user's home
    assert as_root.of("stdout") == b"0\n/root\n"


async def test_megabytes_of_output_arrive_whole(client: EnvdClient, box: NspawnBox) -> None:
    out = Output()
    script = "seq 1 600000; seq 1 200000 >&2; echo done"
    assert await run(client, box.id, sh(script), on_output=out) == 0
    expected = "".join(f"{i}\n" for i in range(1, 600001)).encode() + b"done\n"
    assert len(expected) > 4_000_000
    assert out.of("stdout") == expected
    assert out.of("stderr") == "".join(f"{i}\n" for i in range(1, 200001)).encode()


async def test_refusals_carry_envds_words(client: EnvdClient, box: NspawnBox) -> None:
    with pytest.raises(CommandError, match=r"unauthenticated: invalid username: 'nobody-here'"):
        await run(client, box.id, sh("true", user="nobody-here"))
    with pytest.raises(CommandError, match=r"invalid_argument: cwd '/no/such/dir' does not exist"):
        await run(client, box.id, sh("true", cwd="/no/such/dir"))
    with pytest.raises(CommandError, match="invalid username"):
        await start(client, box.id, sh("true", user="nobody-here"))


async def test_a_missing_shell_is_exit_127(client: EnvdClient, box: NspawnBox) -> None:
    # envd execs through a shell of its own, so a missing program is the shell's 127 and
    # its message, as a missing command inside the script would be.
    out = Output()
    no_shell = Command("true", ("/bin/no-such-shell", "-c"))
    assert await run(client, box.id, no_shell, on_output=out) == 127
    assert b"/bin/no-such-shell: not found" in out.of("stderr")


async def test_unreachable_envd(box: NspawnBox) -> None:
    nowhere = EnvdClient()
    try:
        with pytest.raises(EnvdUnreachable, match="is not running"):
            await run(nowhere, box.id, sh("true"))
    finally:
        await nowhere.aclose()


async def test_timeout_kills_the_command(client: EnvdClient, box: NspawnBox) -> None:
    with pytest.raises(CommandTimedOut, match=r"still running after 0\.3 s"):
        await run(client, box.id, sh("sleep 876543"), timeout_s=0.3)

    async def killed() -> bool:
        # The template has no procps; the bracket keeps grep from finding itself.
        find = "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -q 'sleep 87654[3]'"
        return await run(client, box.id, sh(find)) == 1

    await wait_until_async(killed, 30, "envd to kill the timed-out command")


async def test_started_server_keeps_serving(client: EnvdClient, box: NspawnBox) -> None:
    await run(client, box.id, sh("mkdir -p /tmp/site && echo served > /tmp/site/index.txt"))
    server = sh("exec python3 -m http.server 8123 --bind 127.0.0.1", cwd="/tmp/site", user="user")
    pid = await start(client, box.id, server)
    assert pid > 0
    await wait_ready(client, box.id, sh(": </dev/tcp/127.0.0.1/8123"), timeout_s=30)
    # From the host, over the sandbox's own loopback, after Start's stream was closed.
    for _ in range(3):
        reader, writer = await box.netns.open_connection(8123)
        writer.write(b"GET /index.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
        assert answer.startswith(b"HTTP/1.0 200")
        assert answer.endswith(b"\r\n\r\nserved\n")
    owner = Output()
    assert await run(client, box.id, sh(f"stat -c %U /proc/{pid}"), on_output=owner) == 0
    assert owner.of("stdout").strip() == b"user"


async def test_wait_ready_retries_until_success(client: EnvdClient, box: NspawnBox) -> None:
    # Succeeds at the fourth attempt, then no more attempts are made.
    ready = sh(
        "n=$(cat /tmp/ready-count 2>/dev/null || echo 0); echo $((n + 1)) > /tmp/ready-count; "
        "[ $n -ge 3 ]"
    )
    await wait_ready(client, box.id, ready, timeout_s=60)
    out = Output()
    await run(client, box.id, sh("cat /tmp/ready-count"), on_output=out)
    assert out.of("stdout") == b"4\n"


async def test_wait_ready_times_out_with_the_last_output(
    client: EnvdClient, box: NspawnBox
) -> None:
    never = sh("echo not listening yet; echo port 9 closed >&2; exit 1")
    with pytest.raises(NotReady, match=r"within 0\.5 s \(\d+ attempts\)") as caught:
        await wait_ready(client, box.id, never, timeout_s=0.5)
    assert "exited 1" in str(caught.value)
    assert "not listening yet" in str(caught.value)
    assert "port 9 closed" in str(caught.value)
    # A ready command that hangs is killed at the deadline.
    with pytest.raises(NotReady, match="still running"):
        await wait_ready(client, box.id, sh("echo hanging; sleep 765432"), timeout_s=0.5)


async def test_wait_ready_does_not_retry_a_refusal(client: EnvdClient, box: NspawnBox) -> None:
    with pytest.raises(CommandError, match="does not exist") as caught:
        await wait_ready(client, box.id, sh("true", cwd="/no/such/dir"), timeout_s=30)
    assert not isinstance(caught.value, NotReady)


async def test_after_init_the_token_and_the_sandbox_env(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    """A sandbox as sandboxd's creates leave it: /init set a token, env vars and a workdir."""
    box = await runtime.boot(uuid.uuid4().hex[:16], BootImage((base_template,)))
    envd = EnvdClient()
    envd.reach(box.id, box.dialer)
    try:
        token = secrets.token_hex(16)
        init = {"accessToken": token, "envVars": {"FROM_INIT": "yes"}, "defaultWorkdir": "/srv"}
        status, _ = await envd.request(box.id, "POST", "/init", body=init)
        assert status == 204
        out = Output()
        command = sh('echo "$FROM_INIT $FROM_COMMAND"; pwd', env={"FROM_COMMAND": "too"})
        assert await run(envd, box.id, command, on_output=out, token=token) == 0
        assert out.of("stdout") == b"yes too\n/srv\n"
        with pytest.raises(CommandError, match="http_401: unauthorized access, please provide"):
            await run(envd, box.id, sh("true"), token=token[::-1])
        with pytest.raises(CommandError, match="http_401: unauthorized access, please provide"):
            await start(envd, box.id, sh("true"))
    finally:
        await envd.aclose()
