"""A private envd subprocess for SDK tests that change daemon state or restart it.

The daemon runs from the repository's own virtualenv (ENVD_PYTHON, exported by scripts/test-sdk),
not from the SDK's virtualenv this suite runs in.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

SHARED_ENVD_URL = "http://localhost:49983"
REPO_ROOT = Path(__file__).resolve().parents[3]
ENVD_PYTHON = os.environ.get("ENVD_PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python"))
# A daemon must not outlive a test run killed hard (SIGKILL skips fixture teardown); setpriv
# (util-linux) sets the parent-death signal and execs envd in the same process.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM", "--")
TRACEBACK_MARKER = "Traceback (most recent call last)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """envd on one fixed port that can be stopped and started again on that same port."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://localhost:{self.port}"
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [*DIE_WITH_PARENT, *self._envd_command()],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"envd exited at startup:\n{self.log_text()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).is_success:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"envd did not answer /health in 20 s:\n{self.log_text()}")

    def _envd_command(self) -> list[str]:
        return [
            ENVD_PYTHON,
            "-m",
            "envd",
            "-isnotfc",
            "-bind",
            "127.0.0.1",
            "-port",
            str(self.port),
        ]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tracebacks(self) -> list[str]:
        return self.log_text().split(TRACEBACK_MARKER)[1:]

    def init(self, body: dict[str, object], token: str | None = None) -> httpx.Response:
        """POST /init the way the E2B orchestrator does after creating a sandbox."""
        headers = {"X-Access-Token": token} if token else {}
        return httpx.post(f"{self.url}/init", json=body, headers=headers, timeout=10)
