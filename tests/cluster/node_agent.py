"""A real `sandboxd node` for tests: a subprocess with its own state directory, cgroup parent,
node id, loopback ports for its internal API and proxy, a cluster token and the shared database
(a database of Debian's PostgreSQL started for the run, tests/store/postgres_server.py);
stopped by its pid, and, like tests/sandboxd/serving.py's serve, every sandbox it left killed.

Its sandboxes get no network (`--no-network`): a node agent networks them as serve does, and
outside the fake internet (tests/network/fake_internet.py) that would be the machine's real
network; a test that needs networked sandboxes runs the agent inside it, as tests/network does
serve, and sets `in_fake_internet`."""

from __future__ import annotations

import contextlib
import secrets
from typing import TYPE_CHECKING

import httpx

from tests.sandboxd.serving import NO_NETWORK, Sandboxd, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CLUSTER_TOKEN_HEADER = "X-Sandboxd-Cluster-Token"  # noqa: S105  # a header name


class NodeAgent(Sandboxd):
    """One state directory run by (successive) `sandboxd node` processes, as node `node_id`."""

    def __init__(self, state_dir: Path, base_rootfs: Path | None, database_url: str,
                 node_id: str, *flags: str, token: str | None = None) -> None:  # fmt: skip
        super().__init__(state_dir, base_rootfs, *flags)
        self.node_id = node_id
        self.database_url = database_url
        self.token = token or secrets.token_hex(16)
        self.api_port = free_port()
        self.proxy_port = free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.proxy_url = f"http://127.0.0.1:{self.proxy_port}"
        self.env = {"SANDBOXD_CLUSTER_TOKEN": self.token}
        self.listen_host = "127.0.0.1"  # where both ports listen
        self.advertise = "127.0.0.1"  # where gateways dial them

    def argv(self) -> list[str]:
        base = [] if self.base_rootfs is None else ["--base-rootfs", str(self.base_rootfs)]
        return [*self.command, "node", "--node-id", self.node_id, "--state-dir",
                str(self.state_dir), "--listen", f"{self.listen_host}:{self.api_port}",
                "--proxy-listen", f"{self.listen_host}:{self.proxy_port}", "--advertise", self.advertise,
                "--database-url", self.database_url, "--cgroup-parent", self.cgroup_parent,
                *base, *self.flags]  # fmt: skip

    def kill(self) -> None:
        """SIGKILL, as a machine is lost: its sandboxes stay, its lease runs out."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"sandboxd node exited: {self.log.read_text()[-2000:]}"
        try:
            return self.call_api("list_sandboxes", timeout=1).is_success
        except httpx.TransportError:
            return False

    def call_api(
        self, operation: str, arguments: dict[str, object] | None = None, timeout: float = 120
    ) -> httpx.Response:
        """POST /node/v1/OPERATION with `arguments` and the token (from where the agent runs)."""
        return httpx.post(f"{self.url}/node/v1/{operation}", json=arguments or {},
                          headers=self.headers, timeout=timeout)  # fmt: skip

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def proxy_headers(self) -> dict[str, str]:
        return {CLUSTER_TOKEN_HEADER: self.token}


@contextlib.contextmanager
def running_node(state_dir: Path, base_rootfs: Path, database_url: str, node_id: str,
                 *flags: str) -> Iterator[NodeAgent]:  # fmt: skip
    """A started node agent (without networking unless `flags` say otherwise), cleaned up
    however the block ends."""
    node = NodeAgent(state_dir, base_rootfs, database_url, node_id, NO_NETWORK, *flags)
    try:
        node.start()
        yield node
    finally:
        node.clean_up()
