"""Start and stop real envd daemons for tests and benchmarks: `python -m envd` subprocesses on
loopback, each with its own port and log file."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from tests.waiting import WaitTimeout, wait_until

if TYPE_CHECKING:
    from pathlib import Path

# A traceback in the daemon's log means an exception escaped a handler: always a defect.
TRACEBACK_MARKER = "Traceback (most recent call last)"
# A daemon must not outlive a test run killed hard (SIGKILL skips fixture teardown): setpriv
# (util-linux) sets the parent-death signal and execs the daemon in the same process.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM", "--")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EnvdProcess:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def holds_open(self, path: Path) -> bool:
        """Whether the daemon has `path` open (a transfer of it is under way)."""
        fds = f"/proc/{self.pid}/fd"
        for fd in os.listdir(fds):
            with contextlib.suppress(OSError):  # closed since the listing
                if os.readlink(f"{fds}/{fd}") == str(path):
                    return True
        return False

    def cpu_seconds(self) -> float:
        """User plus system CPU time used so far, all threads."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_envd(
    log_dir: Path,
    *flags: str,
    env: dict[str, str] | None = None,
    journal: bool = False,
    as_user: tuple[int, int] | None = None,
    command: list[str] | None = None,
) -> EnvdProcess:
    """Start `python -m envd` on a free loopback port and wait until /health answers.

    With `journal`, the log file is announced as the journal stream (JOURNAL_STREAM), as
    systemd does for a unit whose stderr is the journal. With `as_user` (uid, gid), the daemon
    runs unprivileged as that user, with no supplementary groups. `command` runs another envd
    (an installed launcher) instead of this tree's.
    """
    credentials: dict[str, Any] = {}
    if as_user is not None:
        credentials = {"user": as_user[0], "group": as_user[1], "extra_groups": []}
    port = free_port()
    log_path = log_dir / f"envd-{port}.log"
    child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    child_env.update(env or {})
    with open(log_path, "wb") as log:
        if journal:
            st = os.fstat(log.fileno())
            child_env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        proc = subprocess.Popen(
            [
                *DIE_WITH_PARENT,
                *(command or [sys.executable, "-m", "envd"]),
                "-port",
                str(port),
                "-bind",
                "127.0.0.1",
                "-isnotfc",
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            **credentials,
        )
    daemon = EnvdProcess(f"http://127.0.0.1:{port}", port, proc, log_path)
    try:
        wait_until(lambda: _healthy(daemon), 15, f"envd on port {port} to answer /health")
    except WaitTimeout as exc:
        daemon.stop()
        raise RuntimeError(f"{exc}:\n{daemon.logs()}") from exc
    return daemon


def _healthy(daemon: EnvdProcess) -> bool:
    if daemon.proc.poll() is not None:
        raise RuntimeError(f"envd exited with {daemon.proc.returncode}:\n{daemon.logs()}")
    try:
        return httpx.get(daemon.url + "/health", timeout=1).status_code == 204
    except httpx.TransportError:
        return False
