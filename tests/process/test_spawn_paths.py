"""Both ways of starting a child leave it in the same state: the spawn helper (the default when
a C compiler is available) and the Python fallback between fork and exec."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from connectrpc.code import Code
from connectrpc.codec import proto_json_codec
from connectrpc.errors import ConnectError

from envd._gen.process.process_connect import ProcessClientSync
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from envd.process.spawn_helper import ensure_helper
from tests.client import AS_USER
from tests.process.client import collect, shell, with_pty

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.envd_process import EnvdProcess


@pytest.fixture(params=["helper", "fallback"])
def client(
    request: pytest.FixtureRequest, envd_factory: Callable[..., EnvdProcess]
) -> Iterator[ProcessClientSync]:
    if request.param == "helper":
        helper = ensure_helper()
        assert helper is not None, "the spawn helper could not be built"
        env = {"ENVD_SPAWN_HELPER": helper}
    else:
        env = {"ENVD_SPAWN_HELPER": "off"}
    daemon = envd_factory(env=env)
    with ProcessClientSync(daemon.url, codec=proto_json_codec(), send_compression=None) as c:
        yield c


@pytest.mark.root
def test_same_child_state(client: ProcessClientSync, workdir: Path) -> None:
    script = (
        "id -u; id -G; pwd; cat /proc/self/oom_score_adj; nice; ionice; "
        "cut -d' ' -f5,6 /proc/$$/stat; readlink /proc/self/fd/0; env | sort"
    )
    request = shell(script, stdin=False, cwd=str(workdir))
    run = collect(client.start(request, headers=AS_USER))
    lines = run.stdout.decode().splitlines()
    assert lines[0] != "0"
    assert lines[2:6] == [str(workdir), "100", "0", "best-effort: prio 4"]
    assert lines[6].split()[0] == str(run.pid)  # leads its own process group
    assert lines[7] == "/dev/null"
    names = {line.split("=", 1)[0] for line in lines[8:]}
    ours = {"E2B_SANDBOX", "HOME", "LOGNAME", "PATH", "USER"}
    assert ours <= names <= ours | {"PWD", "OLDPWD", "SHLVL", "_"}  # the shell adds a few


@pytest.mark.root
def test_same_errors(client: ProcessClientSync, workdir: Path) -> None:
    private = workdir / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(ConnectError) as caught:
        collect(client.start(shell("pwd", cwd=str(private)), headers=AS_USER))
    assert caught.value.code == Code.INVALID_ARGUMENT
    assert caught.value.message == (
        f"error starting process '/bin/sh -c pwd': chdir {private}: permission denied"
    )
    assert collect(client.start(shell("pwd", cwd=str(private)))).stdout == f"{private}\n".encode()
    missing = collect(
        client.start(StartRequest(process=ProcessConfig(cmd="no-such-cmd", args=["a"])))
    )
    assert missing.end is not None
    assert missing.end.exit_code == 127
    assert missing.stderr.endswith(b"no-such-cmd: not found\n")
    not_executable = collect(client.start(StartRequest(process=ProcessConfig(cmd=str(workdir)))))
    assert not_executable.end is not None
    assert not_executable.end.exit_code == 126


def test_same_pty(client: ProcessClientSync) -> None:
    run = collect(client.start(with_pty("/bin/sh", "-c", "tty; stty size", cols=90, rows=30)))
    tty, size = run.pty.decode().splitlines()
    assert re.fullmatch(r"/dev/pts/\d+", tty)
    assert size == "30 90"
