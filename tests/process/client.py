"""Helpers for process tests: requests the SDKs send, selectors and inputs, a whole stream
collected by event kind, and the daemon's children as /proc shows them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from protobuf import Oneof

from envd._gen.process.process_pb import (
    PTY,
    ProcessConfig,
    ProcessEvent,
    ProcessInput,
    ProcessSelector,
    StartRequest,
)

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass
class Run:
    """Every event of one stream, by kind."""

    pid: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    pty: bytes = b""
    keepalives: int = 0
    order: list[str] = field(default_factory=list)
    end: ProcessEvent.EndEvent | None = None

    def add(self, event: ProcessEvent | None) -> None:
        assert event is not None
        assert event.event is not None
        kind = event.event.field
        self.order.append(kind)
        value = event.event.value
        if isinstance(value, ProcessEvent.StartEvent):
            self.pid = value.pid
        elif isinstance(value, ProcessEvent.DataEvent):
            assert value.output is not None
            setattr(
                self, value.output.field, getattr(self, value.output.field) + value.output.value
            )
        elif isinstance(value, ProcessEvent.EndEvent):
            self.end = value
        else:
            self.keepalives += 1


def collect(responses: Iterable[object]) -> Run:
    run = Run()
    for response in responses:
        run.add(response.event)  # type: ignore[attr-defined]  # StartResponse / ConnectResponse
    return run


# bash -l only as `user`: root's login profile on developer machines can be slow or stateful.
def bash(
    script: str, *, stdin: bool | None = None, tag: str | None = None, cwd: str | None = None
) -> StartRequest:
    """What the SDKs send for commands.run(script)."""
    config = ProcessConfig(cmd="/bin/bash", args=["-l", "-c", script], cwd=cwd)
    return StartRequest(process=config, stdin=stdin, tag=tag)


def shell(
    script: str, *, stdin: bool | None = None, tag: str | None = None, cwd: str | None = None
) -> StartRequest:
    """A light /bin/sh command, for tests that start many."""
    config = ProcessConfig(cmd="/bin/sh", args=["-c", script], cwd=cwd)
    return StartRequest(process=config, stdin=stdin, tag=tag)


def with_pty(cmd: str, *args: str, cols: int = 80, rows: int = 24) -> StartRequest:
    return StartRequest(
        process=ProcessConfig(cmd=cmd, args=list(args)),
        pty=PTY(size=PTY.Size(cols=cols, rows=rows)),
    )


def by_pid(pid: int) -> ProcessSelector:
    selector: Oneof[Literal["pid"], int] = Oneof("pid", pid)
    return ProcessSelector(selector=selector)


def by_tag(tag: str) -> ProcessSelector:
    selector: Oneof[Literal["tag"], str] = Oneof("tag", tag)
    return ProcessSelector(selector=selector)


def stdin_input(data: bytes) -> ProcessInput:
    value: Oneof[Literal["stdin"], bytes] = Oneof("stdin", data)
    return ProcessInput(input=value)


def pty_input(data: bytes) -> ProcessInput:
    value: Oneof[Literal["pty"], bytes] = Oneof("pty", data)
    return ProcessInput(input=value)


def zombie_children(pid: int) -> list[int]:
    """Children of `pid` in state Z (exited, never reaped)."""
    zombies = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == pid:
            zombies.append(int(entry))
    return zombies


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is left in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
