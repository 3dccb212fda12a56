"""A fork through the SDK (normal mode only), as E2B's own test_fork.py has it: a child with the
parent's files and its own writes, both running; two children for 60 s; `Sandbox.fork(id)`; a
killed or paused source refused, and a count out of range refused by the SDK itself. Each test
kills what it made."""

from __future__ import annotations

import pytest
from e2b import (
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
)

from tests.sdk.python import sandboxes
from tests.sdk.python.mode import normal_only
from tests.sdk.python.sandboxes import create

pytestmark = normal_only
made = sandboxes.made

STATE = "/home/user/state.txt"


def children(made: list[Sandbox], forks: list[Sandbox | Exception]) -> list[Sandbox]:
    """The forks, each a Sandbox (killed after the test with the rest of `made`)."""
    started = [f for f in forks if isinstance(f, Sandbox)]
    made.extend(started)
    assert started == forks, forks
    return started


def test_fork(made: list[Sandbox]) -> None:
    sandbox = create(made)
    sandbox.files.write(STATE, "state before fork")
    forks = sandbox.fork()
    assert len(forks) == 1
    [fork] = children(made, forks)
    assert fork.sandbox_id != sandbox.sandbox_id
    assert sandbox.is_running()
    assert fork.is_running()
    assert fork.files.read(STATE) == "state before fork"
    fork.files.write(STATE, "modified in fork")
    assert sandbox.files.read(STATE) == "state before fork"
    assert fork.files.read(STATE) == "modified in fork"


def test_fork_multiple(made: list[Sandbox]) -> None:
    sandbox = create(made, metadata={"suite": "fork"})
    forks = children(made, sandbox.fork(count=2, timeout=60))
    ids = {f.sandbox_id for f in forks}
    assert len(ids) == 2
    assert sandbox.sandbox_id not in ids
    for fork in forks:
        assert fork.is_running()
        info = fork.get_info()
        assert info.metadata == {"suite": "fork"}
        assert (info.end_at - info.started_at).total_seconds() == 60


def test_fork_by_id(made: list[Sandbox]) -> None:
    sandbox = create(made)
    [fork] = children(made, Sandbox.fork(sandbox.sandbox_id))
    assert fork.is_running()
    assert fork.commands.run("echo forked").stdout == "forked\n"


def test_fork_of_a_killed_or_paused_sandbox(made: list[Sandbox]) -> None:
    sandbox = create(made)
    assert sandbox.pause() is True
    with pytest.raises(SandboxException, match="is paused and cannot be forked; resume it"):
        sandbox.fork()
    sandbox.kill()
    with pytest.raises(SandboxNotFoundException):
        sandbox.fork()


def test_fork_invalid_count() -> None:
    with pytest.raises(InvalidArgumentException):
        Sandbox.fork("sbx-test", count=0)
