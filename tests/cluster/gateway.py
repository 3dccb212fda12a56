"""A real `sandboxd gateway` for tests: a subprocess on a free loopback port over the shared
database, with the cluster's token and the tests' API key, stopped by its pid (SIGTERM, or
SIGKILL to play a gateway that dies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import httpx

from tests.sandboxd.serving import API_KEY, free_port
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

DOMAIN = "cluster.test"


class Gateway:
    def __init__(self, log: Path, database_url: str, token: str) -> None:
        self.log = log
        self.database_url = database_url
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "sandboxd", "gateway", "--database-url", self.database_url,
                "--listen", f"127.0.0.1:{self.port}", "--domain", DOMAIN]  # fmt: skip
        env = {**os.environ, "SANDBOXD_API_KEY": API_KEY, "SANDBOXD_CLUSTER_TOKEN": self.token}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        wait_until(self._ready, 60, "sandboxd gateway to serve")

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"gateway exited: {self.log.read_text()[-2000:]}"
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 204
        except httpx.TransportError:
            return False

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"X-API-Key": API_KEY}, timeout=120)

    def kill(self) -> None:
        """SIGKILL: a gateway that dies mid-whatever."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """SIGTERM; its log must hold no traceback."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        assert "Traceback" not in self.log.read_text(), self.log.read_text()[-3000:]
