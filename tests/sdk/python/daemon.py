"""A private envd subprocess for SDK tests that change daemon state or restart it.

The daemon runs from the repository's own virtualenv (ENVD_PYTHON, exported by scripts/test-sdk),
not from the SDK's virtualenv this suite runs in.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

# Shared with the daemon suite: these modules need only the standard library, httpx and anyio,
# which this virtualenv has too.
from tests.envd_process import DIE_WITH_PARENT, TRACEBACK_MARKER, free_port
from tests.waiting import WaitTimeout, wait_until

SHARED_ENVD_URL = "http://localhost:49983"
REPO_ROOT = Path(__file__).resolve().parents[3]
ENVD_PYTHON = os.environ.get("ENVD_PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python"))


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
        try:
            wait_until(self._healthy, 20, f"envd on port {self.port} to answer /health")
        except WaitTimeout as exc:
            raise RuntimeError(f"{exc}:\n{self.log_text()}") from exc

    def _healthy(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise RuntimeError(f"envd exited at startup:\n{self.log_text()}")
        try:
            return httpx.get(f"{self.url}/health", timeout=1).is_success
        except httpx.TransportError:
            return False

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
