"""A node agent with networked sandboxes, inside the fake internet (tests/network): a command
runs in a sandbox through the node's proxy port with the cluster token, and neither of the
node's ports is reachable from inside its sandbox (the sandboxes' `input` chain of
sandboxd.network.firewall refuses everything on the host but the services offered to them),
though the agent listens on every address, its sandboxes' gateways included."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sandboxd.runtime.spec import read_record
from tests.client import envelope, exit_and_stdout
from tests.cluster.node_agent import NodeAgent
from tests.network.fake_internet import DNS_ADDRESS, UPLINK_ADDRESS
from tests.network.in_sandbox import script
from tests.network.served import POOL
from tests.sandboxd.serving import kill_sandboxes
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.network.fake_internet import FakeInternet
    from tests.store.postgres_server import PostgresServer

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]

CONNECT = script("connect")
REFUSED = "113"  # EHOSTUNREACH: the firewall's ICMP "administratively prohibited"


class UplinkNode(NodeAgent):
    """A node agent in the fake internet's `uplink`, networking its sandboxes there, both ports
    on every address; called from inside `uplink`."""

    in_fake_internet = True

    def __init__(self, net: FakeInternet, state_dir: Any, database_url: str) -> None:
        super().__init__(state_dir, ensure_base_template(), database_url, "uplink",
                         "--network-pool", POOL, "--dns", DNS_ADDRESS)  # fmt: skip
        self.net = net
        self.listen_host = "0.0.0.0"  # the sandboxes' gateways too
        self.command = ["nsenter", f"--net={net.uplink.path}", "--", sys.executable, "-m",
                        "sandboxd"]  # fmt: skip

    def call_api(
        self, operation: str, arguments: dict[str, object] | None = None, timeout: float = 120
    ) -> httpx.Response:
        call = super().call_api
        return self.net.uplink.call(lambda: call(operation, arguments, timeout))

    def run(self, sandbox_id: str, *argv: str) -> tuple[int, str]:
        """(exit code, stdout) of `argv` in the sandbox, through the node's proxy port."""
        headers = {**self.proxy_headers, "E2b-Sandbox-Id": sandbox_id,
                   "E2b-Sandbox-Port": "49983", "Content-Type": "application/connect+json"}  # fmt: skip
        body = envelope({"process": {"cmd": argv[0], "args": list(argv[1:])}})
        response = self.net.uplink.call(lambda: httpx.post(
            self.proxy_url + "/process.Process/Start", content=body, headers=headers,
            timeout=60))  # fmt: skip
        assert response.status_code == 200, response.text
        return exit_and_stdout(response.content)

    def clean_up(self) -> None:
        try:
            self.stop()
        finally:
            self.net.uplink.call(kill_sandboxes, self.state_dir, self.cgroup_parent)


@pytest.fixture(scope="module")
def node(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory,
         postgres_server: PostgresServer) -> Iterator[UplinkNode]:  # fmt: skip
    url = postgres_server.socket_url(postgres_server.create_database())
    agent = UplinkNode(net, tmp_path_factory.mktemp("uplink-node") / "state", url)
    try:
        agent.start()
        yield agent
    finally:
        agent.clean_up()


def test_neither_node_port_is_reachable_from_a_sandbox(node: UplinkNode) -> None:
    config = {"template": "base", "timeout_s": 300, "secure": False, "auto_pause": False}
    created = node.call_api("create", {"config": config})
    assert created.status_code == 200, created.text
    sandbox_id = created.json()["sandbox_id"]
    try:
        record = read_record(node.box_dir(sandbox_id))
        assert record is not None
        assert record.net is not None
        gateway = record.net.host_ip
        assert node.run(sandbox_id, "echo", "through the node") == (0, "through the node\n")
        for port in (node.api_port, node.proxy_port):
            for address in (gateway, UPLINK_ADDRESS):
                assert node.run(sandbox_id, "python3", "-c", CONNECT, address, str(port)) == (
                    0, REFUSED + "\n"), f"{address}:{port}"  # fmt: skip
    finally:
        assert node.call_api("kill", {"sandbox_id": sandbox_id}).status_code == 200
