"""Process/Start: event order, exit statuses, the child's user, environment, cwd, priorities."""

from __future__ import annotations

import base64
import os
import pwd
import re
from typing import TYPE_CHECKING

import pytest
from connectrpc.code import Code
from connectrpc.codec import proto_binary_codec, proto_json_codec
from connectrpc.errors import ConnectError

from envd._gen.process.process_connect import ProcessClientSync
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from tests.client import AS_USER
from tests.process.client import bash, collect, shell

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.envd_process import EnvdProcess


def test_start_first_then_output_then_end(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell("echo out; echo err >&2; exit 3")))
    assert run.order[0] == "start"
    assert run.order[-1] == "end"
    assert run.pid > 0
    assert (run.stdout, run.stderr) == (b"out\n", b"err\n")
    assert run.end is not None
    assert (run.end.exit_code, run.end.exited) == (3, True)
    assert run.end.status == run.end.error == "exit status 3"


def test_exit_zero_has_no_error(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell("true")))
    assert run.end is not None
    assert (run.end.exit_code, run.end.exited, run.end.status) == (0, True, "exit status 0")
    assert not run.end.has_field("error")


@pytest.mark.parametrize(
    ("signal_name", "status"), [("TERM", "signal: terminated"), ("KILL", "signal: killed")]
)
def test_signalled_exit(proc: ProcessClientSync, signal_name: str, status: str) -> None:
    run = collect(proc.start(shell(f"kill -{signal_name} $$")))
    assert run.end is not None
    assert (run.end.exit_code, run.end.exited) == (-1, False)
    assert run.end.status == run.end.error == status


def test_missing_command_exits_127_not_an_rpc_error(proc: ProcessClientSync) -> None:
    run = collect(proc.start(StartRequest(process=ProcessConfig(cmd="no-such-command-x"))))
    assert run.end is not None
    assert run.end.exit_code == 127
    assert b"no-such-command-x" in run.stderr


def test_every_byte_arrives_before_the_end(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell("seq 1 200000; printf tail")))
    expected = "".join(f"{i}\n" for i in range(1, 200001)).encode() + b"tail"
    assert run.stdout == expected
    assert run.order[-1] == "end"


def test_binary_codec(envd: EnvdProcess) -> None:
    with ProcessClientSync(envd.url, codec=proto_binary_codec(), send_compression=None) as client:
        run = collect(client.start(shell("printf 'a\\0b'")))
    assert run.stdout == b"a\0b"


def test_broken_utf8_passes_through_as_raw_bytes(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell(r"printf '\377\376ok\300'")))
    assert run.stdout == b"\xff\xfeok\xc0"


@pytest.mark.root
def test_runs_as_the_basic_auth_user(proc: ProcessClientSync) -> None:
    script = 'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; pwd'
    run = collect(proc.start(bash(script), headers=AS_USER))
    uid, gid, groups, names, cwd = run.stdout.decode().splitlines()
    user = pwd.getpwnam("user")
    assert (int(uid), int(gid)) == (user.pw_uid, user.pw_gid)
    assert sorted(int(g) for g in groups.split()) == sorted(os.getgrouplist("user", user.pw_gid))
    assert names == "/home/user user user"
    assert cwd == "/home/user"


@pytest.mark.root
def test_default_user_is_root(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell('id -u; echo "$HOME"; pwd')))
    assert run.stdout.decode().split() == ["0", "/root", "/root"]


@pytest.mark.root
def test_bashrc_of_user_listed_with_its_owner(proc: ProcessClientSync) -> None:
    run = collect(proc.start(bash("ls -la ~"), headers=AS_USER))
    line = next(x for x in run.stdout.decode().splitlines() if x.endswith(" .bashrc"))
    assert re.match(r"-rw-r--r-- +\d+ user +user ", line), line


@pytest.mark.root
def test_child_priorities_reset_and_own_process_group(
    envd: EnvdProcess, proc: ProcessClientSync
) -> None:
    script = "cat /proc/self/oom_score_adj; nice; ionice; cut -d' ' -f5,6 /proc/$$/stat"
    run = collect(proc.start(bash(script), headers=AS_USER))
    oom, nice, ionice, groups = run.stdout.decode().splitlines()
    assert (oom, nice, ionice) == ("100", "0", "best-effort: prio 4")
    pgid, sid = (int(x) for x in groups.split())
    assert pgid == run.pid  # its own process group, never envd's
    assert sid == os.getsid(envd.pid)  # a new session only for a PTY


@pytest.mark.root
def test_stdin_disabled_read_fails(proc: ProcessClientSync) -> None:
    run = collect(proc.start(bash("read -p 'name? ' x", stdin=False), headers=AS_USER))
    assert run.end is not None
    assert run.end.exit_code == 1


def test_stdin_disabled_is_dev_null(proc: ProcessClientSync) -> None:
    run = collect(proc.start(shell("readlink /proc/self/fd/0; wc -c", stdin=False)))
    assert run.stdout.decode().split() == ["/dev/null", "0"]


def test_cwd_missing_is_invalid_argument(proc: ProcessClientSync) -> None:
    with pytest.raises(ConnectError) as caught:
        collect(proc.start(bash("pwd", cwd="/nonexistent/dir")))
    assert caught.value.code == Code.INVALID_ARGUMENT
    assert caught.value.message == "cwd '/nonexistent/dir' does not exist"


def test_cwd_other_users_home_is_invalid_argument(proc: ProcessClientSync) -> None:
    with pytest.raises(ConnectError) as caught:
        collect(proc.start(bash("pwd", cwd="~root/x")))
    assert caught.value.code == Code.INVALID_ARGUMENT


@pytest.mark.root
def test_cwd_relative_and_tilde_resolve_under_home(proc: ProcessClientSync) -> None:
    run = collect(proc.start(bash("pwd", cwd="~"), headers=AS_USER))
    assert run.stdout == b"/home/user\n"


@pytest.mark.root
def test_unknown_basic_auth_user_is_unauthenticated(proc: ProcessClientSync) -> None:
    header = {"authorization": "Basic " + base64.b64encode(b"nosuchuser:").decode()}
    with pytest.raises(ConnectError) as caught:
        collect(proc.start(shell("true"), headers=header))
    assert caught.value.code == Code.UNAUTHENTICATED


def test_request_env_overrides_and_nothing_else_leaks(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory(
        env={"VIRTUAL_ENV": "/opt/venv", "NOTIFY_SOCKET": "@envd-test-none", "LEAKY": "1"}
    )
    request = shell("env")
    assert request.process is not None
    request.process.envs = {"MINE": "yes", "HOME": "/elsewhere"}
    with ProcessClientSync(daemon.url, codec=proto_json_codec(), send_compression=None) as client:
        run = collect(client.start(request))
    env = dict(line.split("=", 1) for line in run.stdout.decode().splitlines())
    for name in ("VIRTUAL_ENV", "NOTIFY_SOCKET", "LEAKY", "LANG", "INVOCATION_ID"):
        assert name not in env
    assert env["MINE"] == "yes"
    assert env["HOME"] == "/elsewhere"  # request envs win over the defaults
    assert env["USER"] == env["LOGNAME"] == "root"
    assert env["E2B_SANDBOX"] == "false"  # the env store
    assert env["PATH"] == os.environ["PATH"]


def test_non_integer_timeout_header_is_rejected(proc: ProcessClientSync) -> None:
    with pytest.raises(ConnectError) as caught:
        collect(proc.start(shell("true"), headers={"connect-timeout-ms": "soon"}))
    assert caught.value.code == Code.INVALID_ARGUMENT
