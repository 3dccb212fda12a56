"""Servers the peer benchmarks start (envd, sshd, Jupyter Server): stopped by pid, and the CPU
time of everything they run.

As root, each server is moved into a cgroup of its own (every hierarchy, named
bench-peers-PID/NAME, removed afterwards) and its CPU is the cgroup's usage: sshd's privileged
monitor exits without reaping the session process under it, so that process's time (the
cipher work) never reaches the listener's cutime. Unprivileged, the fallback reads
/proc/PID/stat over the live process tree (utime + stime + cutime + cstime), as it does
where no cgroup2 hierarchy is mounted.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from sandboxd.errors import HostError
from sandboxd.host.cgroups import CgroupHost, Limits, SandboxCgroups

if TYPE_CHECKING:
    from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """Fields 3 onwards of /proc/PID/stat (after the command name, which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    except FileNotFoundError:  # exited meanwhile
        return []


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime (fields 14-17) of the process and its descendants."""
    try:
        own = sum(int(value) for value in _stat(pid)[11:15]) / CLOCK_TICKS
    except FileNotFoundError:  # exited meanwhile: its time is now its parent's
        return 0.0
    return own + sum(tree_cpu_seconds(child) for child in _children(pid))


def _has_exiting_children(pid: int) -> bool:
    """A child that exited but is not yet reaped (zombie), or is exiting (dead)."""
    for child in _children(pid):
        try:
            if _stat(child)[0] in "ZX":
                return True
        except FileNotFoundError:
            return True
    return False


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until something accepts on 127.0.0.1:port; fails early if the server exited."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}:\n{log.read_text()}") from None
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class CpuCgroups:
    """The cgroups this run makes for its servers (none when not root), and their removal."""

    def __init__(self) -> None:
        self.host: CgroupHost | None = None
        if os.geteuid() == 0:
            try:
                self.host = CgroupHost.detect()
            except HostError as exc:
                print(f"CPU from /proc, not cgroups (sshd sessions missed): {exc}", file=sys.stderr)
        self.parent = f"bench-peers-{os.getpid()}"
        self.made: list[SandboxCgroups] = []

    def new(self, name: str, pid: int) -> SandboxCgroups | None:
        """A cgroup NAME in every hierarchy with the process `pid` in it (what it forks from
        now on follows)."""
        if self.host is None:
            return None
        cgroup = SandboxCgroups(self.host, self.parent, name)
        self.made.append(cgroup)
        cgroup.create(Limits())
        for directory in cgroup.dirs:
            (directory / "cgroup.procs").write_text(str(pid))
        return cgroup

    def remove(self) -> None:
        """After the servers stopped: their cgroups, then the parent in every hierarchy."""
        for cgroup in self.made:
            if cgroup.exists():
                cgroup.wait_empty(10)
                cgroup.remove()
        if self.host is not None:
            for mount in {self.host.unified, *self.host.v1.values()}:
                with contextlib.suppress(FileNotFoundError):
                    (mount / self.parent).rmdir()


class ServerProcess:
    """A started server process: its CPU meter and its stop. `resident` are the processes
    that stay between measurements (the server itself, a kept ssh connection's session)."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.proc = proc
        self.cgroup: SandboxCgroups | None = None
        self.resident = {proc.pid}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def meter(self, cgroups: CpuCgroups) -> None:
        self.cgroup = cgroups.new(self.name, self.pid)

    def keep_current_processes(self) -> None:
        """What runs now stays between measurements (a kept connection's session)."""
        if self.cgroup is not None:
            self.resident = self.cgroup.pids()

    def _settled(self) -> bool:
        if self.cgroup is None:
            return not _has_exiting_children(self.pid)
        return self.cgroup.pids() <= self.resident

    def cpu_seconds(self) -> float:
        """CPU of all it ran so far, once the sessions of the last measurement ended (up to
        5 s)."""
        deadline = time.monotonic() + 5
        while not self._settled() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.cgroup is not None:
            return self.cgroup.usage().cpu_usec / 1e6
        return tree_cpu_seconds(self.pid)

    def stop(self) -> None:
        stop_process(self.proc)
