"""A real `sandboxd gateway` for tests: a subprocess on a free loopback port over the shared
database, with the cluster's token and the tests' API key, stopped by its pid (SIGTERM, as
tests/sandboxd/serving.py stops serve, or SIGKILL to play a gateway that dies)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import httpx

from tests.sandboxd.serving import NO_NETWORK, Sandboxd, free_port

if TYPE_CHECKING:
    from pathlib import Path

DOMAIN = "cluster.test"


class Gateway(Sandboxd):
    """`name` names its log beside it (a gateway keeps no state: the directory is never made);
    it runs no sandbox, hence networks none (NO_NETWORK, which serve's fixture asks for)."""

    def __init__(self, name: Path, database_url: str, token: str) -> None:
        super().__init__(name, None, NO_NETWORK)
        self.database_url = database_url
        self.token = token
        self.env = {"SANDBOXD_CLUSTER_TOKEN": token}

    def argv(self) -> list[str]:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        return [*self.command, "gateway", "--database-url", self.database_url,
                "--listen", f"127.0.0.1:{port}", "--domain", DOMAIN]  # fmt: skip

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"gateway exited: {self.log.read_text()[-2000:]}"
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 204
        except httpx.TransportError:
            return False

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=120)

    def kill(self) -> None:
        """SIGKILL: a gateway that dies mid-whatever."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None
