"""Sandbox.commands and Sandbox.pty (sync API) through the real SDK."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from e2b import (
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    Sandbox,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import PtySize

from tests.sdk.python.mode import DEFAULT_HOME, DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import Callable

    from e2b.sandbox_sync.commands.command_handle import CommandHandle

# Commands killed early run as `user`: a SIGKILL landing in root's login profile
# (pyenv rehash on this kind of machine) leaves a lock that stalls every later root shell.
KILLED_EARLY_USER = "user"


def test_run_returns_output_and_exit_code(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("echo out; echo err >&2")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "out\n", "err\n")
    assert result.error is None


def test_non_zero_exit_raises_command_exit_exception(sandbox: Sandbox) -> None:
    with pytest.raises(CommandExitException) as caught:
        sandbox.commands.run("echo partial; echo broken >&2; exit 3")
    assert caught.value.exit_code == 3
    assert caught.value.stdout == "partial\n"
    assert caught.value.stderr == "broken\n"


def test_stdout_and_stderr_callbacks_arrive_while_running(sandbox: Sandbox, workdir: str) -> None:
    # After each of its first two lines the command waits for the test to have seen it: output
    # held back until the exit would never let it end.
    seen: list[tuple[str, str]] = []

    def seeing(kind: str) -> Callable[[str], None]:
        def callback(line: str) -> None:
            seen.append((kind, line))
            mark = f"{workdir}/seen-{line.strip()}"
            threading.Thread(target=sandbox.files.write, args=(mark, "")).start()

        return callback

    wait_for = "while [ ! -e {0}/seen-{1} ]; do sleep 0.05; done"
    sandbox.commands.run(
        f"echo one; {wait_for.format(workdir, 'one')}; echo two >&2; "
        f"{wait_for.format(workdir, 'two')}; echo three",
        on_stdout=seeing("out"),
        on_stderr=seeing("err"),
        timeout=120,
    )
    assert seen == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]


def test_large_output_arrives_complete(sandbox: Sandbox) -> None:
    # Output written just before exit must all arrive before the end event.
    result = sandbox.commands.run("head -c 3000000 /dev/zero | tr '\\0' x; printf END")
    assert len(result.stdout) == 3_000_003
    assert result.stdout.endswith("xEND")


def test_background_command_wait(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 0.3; echo done", background=True)
    assert handle.pid > 0
    result = handle.wait()
    assert (result.exit_code, result.stdout) == (0, "done\n")


def test_connect_to_running_command_and_list(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 0.5; echo late; sleep 0.5", background=True)
    try:
        listed = {p.pid: p for p in sandbox.commands.list()}
        assert handle.pid in listed
        assert listed[handle.pid].cmd == "/bin/bash"
        assert listed[handle.pid].args[-1] == "sleep 0.5; echo late; sleep 0.5"

        handle.disconnect()
        again = sandbox.commands.connect(handle.pid)
        result = again.wait()
        assert (result.exit_code, result.stdout) == (0, "late\n")
    finally:
        handle.kill()
    assert handle.pid not in {p.pid for p in sandbox.commands.list()}


def test_kill(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 30", background=True, user=KILLED_EARLY_USER)
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as caught:
        handle.wait()
    assert caught.value.exit_code == -1
    assert caught.value.error == "signal: killed"
    assert sandbox.commands.kill(handle.pid) is False  # gone


def test_missing_process_errors(sandbox: Sandbox) -> None:
    assert sandbox.commands.kill(999_999) is False
    with pytest.raises(NotFoundException):
        sandbox.commands.connect(999_999)
    with pytest.raises(NotFoundException):
        sandbox.commands.send_stdin(999_999, "x")


def test_send_stdin_and_close_it(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    handle.send_stdin("hello ")
    sandbox.commands.send_stdin(handle.pid, b"world\n")
    handle.close_stdin()
    result = handle.wait()
    assert (result.exit_code, result.stdout) == (0, "hello world\n")


def test_stream_input(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.stream_input(handle.pid, iter([b"a", "b", b"c\n"]))
    handle.close_stdin()
    assert handle.wait().stdout == "abc\n"


def test_stdin_disabled_reads_eof(sandbox: Sandbox) -> None:
    with pytest.raises(CommandExitException) as caught:
        sandbox.commands.run("read -r line")
    assert caught.value.exit_code == 1


def test_env_vars_cwd_and_user(sandbox: Sandbox, workdir: str) -> None:
    result = sandbox.commands.run(
        'echo "$GREETING|$(pwd)|$(whoami)|$HOME"', envs={"GREETING": "hi there"}, cwd=workdir
    )
    assert result.stdout == f"hi there|{workdir}|{DEFAULT_USER}|{DEFAULT_HOME}\n"
    as_user = sandbox.commands.run("echo $(whoami):$HOME:$(pwd)", user="user")
    assert as_user.stdout == "user:/home/user:/home/user\n"
    as_root = sandbox.commands.run("id -u", user="root")
    assert as_root.stdout == "0\n"


def test_missing_cwd_is_invalid_argument(sandbox: Sandbox, workdir: str) -> None:
    with pytest.raises(InvalidArgumentException, match="does not exist"):
        sandbox.commands.run("pwd", cwd=f"{workdir}/absent")


def test_command_timeout(sandbox: Sandbox) -> None:
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 10", timeout=1, user=KILLED_EARLY_USER)


def test_command_killed_while_output_is_streamed(sandbox: Sandbox) -> None:
    chunks: list[str] = []

    def kill_on_third_tick(out: str) -> None:
        chunks.append(out)
        if len(chunks) == 3:
            # From another thread, as an independent client would: the stream is mid-read.
            threading.Thread(target=sandbox.commands.kill, args=(handle.pid,)).start()

    handle = sandbox.commands.run("while true; do echo tick; sleep 0.05; done", background=True)
    with pytest.raises(CommandExitException) as caught:
        handle.wait(on_stdout=kill_on_third_tick)
    assert (caught.value.exit_code, caught.value.error) == (-1, "signal: killed")
    assert caught.value.stdout.startswith("tick\ntick\ntick\n")


def read_pty_until(terminal: CommandHandle, output: bytearray, needle: bytes) -> None:
    """Collect PTY output until `needle` shows up (pytest-timeout bounds a hang)."""
    for _, _, chunk in terminal:
        output.extend(chunk or b"")
        if needle in output:
            return
    raise AssertionError(f"{needle!r} never arrived; got {bytes(output)!r}")


def test_pty_create_input_resize_and_kill(sandbox: Sandbox) -> None:
    output = bytearray()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; echo pty-$((6*7))\n")
    read_pty_until(terminal, output, b"pty-42")
    assert b"24 80" in output

    sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; echo resized-$((1+1))\n")
    read_pty_until(terminal, output, b"resized-2")
    assert b"40 120" in output

    assert sandbox.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException) as caught:
        terminal.wait()
    assert caught.value.exit_code == -1


def test_pty_exit_code_and_connect(sandbox: Sandbox) -> None:
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    terminal.disconnect()
    again = sandbox.pty.connect(terminal.pid)
    sandbox.pty.send_stdin(terminal.pid, b"echo re-$((2+3))ttached; exit 0\n")
    output = bytearray()
    result = again.wait(on_pty=output.extend)
    assert result.exit_code == 0
    assert b"re-5ttached" in output
