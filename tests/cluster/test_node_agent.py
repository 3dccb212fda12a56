"""`sandboxd node` driven over the wire as a gateway drives it: RemoteNode (sandboxd.node.remote)
against a real node agent process for every node service operation, the domain errors raised on
the client as the node's classes, the cluster token required on both ports, envd's API through
the node's proxy port, and the agent's sandboxes adopted by its next start."""

from __future__ import annotations

import base64
import json
import struct
from typing import TYPE_CHECKING

import httpx
import pytest

from sandboxd.errors import (
    NodeUnreachable,
    NotAllowed,
    SandboxError,
    SandboxNotFound,
    TemplateNotFound,
    WrongState,
)
from sandboxd.node.models import SandboxConfig
from sandboxd.node.remote import RemoteNode
from sandboxd.store.rows import DEFAULT_TEAM_ID
from tests.client import start_request
from tests.cluster.node_agent import running_node
from tests.sandboxd.serving import free_port
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from tests.cluster.node_agent import NodeAgent
    from tests.store.postgres_server import PostgresServer

# A node agent starts, boots and stops sandboxes per test: minutes on a loaded machine.
pytestmark = [pytest.mark.root, pytest.mark.anyio, pytest.mark.timeout(600)]

CONFIG = SandboxConfig("base", 300, secure=True, auto_pause=False, metadata={"k": "v"},
                       env_vars={"FOO": "bar"})  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, base_template: Path,
         postgres_server: PostgresServer) -> Iterator[NodeAgent]:  # fmt: skip
    state = tmp_path_factory.mktemp("node") / "state"
    with running_node(state, base_template, postgres_server.create_database(), "n1") as n:
        yield n


@pytest.fixture
async def remote(node: NodeAgent) -> AsyncIterator[RemoteNode]:
    client = RemoteNode(node.node_id, node.url, node.token)
    yield client
    await client.close()


async def test_a_sandbox_s_life_through_remote_node(remote: RemoteNode) -> None:
    info = await remote.create(CONFIG)
    assert (info.template_id, info.running, info.metadata) == ("base", True, {"k": "v"})
    assert info.envd_token
    assert await remote.get(info.sandbox_id) == info
    assert info.sandbox_id in [s.sandbox_id for s in await remote.list_sandboxes()]
    await remote.set_timeout(info.sandbox_id, 600)
    later = await remote.get(info.sandbox_id)
    assert later is not None
    assert later.end_at > info.end_at
    await remote.pause(info.sandbox_id)
    paused = await remote.get(info.sandbox_id)
    assert paused is not None
    assert (paused.state, paused.pause_mode) == ("paused", "full")
    with pytest.raises(WrongState):
        await remote.pause(info.sandbox_id)
    resumed = await remote.resume(info.sandbox_id, 300)
    assert resumed.running
    connected, was_resumed = await remote.connect(info.sandbox_id, 300)
    assert (connected.sandbox_id, was_resumed) == (info.sandbox_id, False)
    logs = await remote.logs(info.sandbox_id, None, None, 50, newest_first=False)
    assert logs
    assert all(entry.message is not None for entry in logs)
    await wait_until_async(
        lambda: remote.metrics(info.sandbox_id, None, None, DEFAULT_TEAM_ID), 60, "a sample"
    )
    samples = await remote.metrics(info.sandbox_id, None, None, DEFAULT_TEAM_ID)
    assert samples[0].cpu_count == info.cpu_count
    await remote.kill(info.sandbox_id)
    assert await remote.get(info.sandbox_id) is None


async def test_domain_errors_come_back_as_the_node_raised_them(remote: RemoteNode) -> None:
    with pytest.raises(SandboxNotFound, match="doesn't exist"):
        await remote.kill("nosuchsandbox")
    with pytest.raises(SandboxNotFound):
        await remote.set_timeout("nosuchsandbox", 10)
    with pytest.raises(TemplateNotFound, match="nosuchtemplate"):
        await remote.create(SandboxConfig("nosuchtemplate", 60, secure=False, auto_pause=False))
    with pytest.raises(NotAllowed):
        await remote.create(SandboxConfig("base", 10**9, secure=False, auto_pause=False))
    assert await remote.get("nosuchsandbox") is None


async def test_a_node_out_of_reach_or_refusing_the_token_says_so(node: NodeAgent) -> None:
    nowhere = RemoteNode("gone", f"http://127.0.0.1:{free_port()}", node.token)
    wrong = RemoteNode(node.node_id, node.url, "not-the-token")
    try:
        with pytest.raises(NodeUnreachable, match="node gone"):
            await nowhere.list_sandboxes()
        with pytest.raises(SandboxError, match="needs the cluster token") as refused:
            await wrong.list_sandboxes()
        assert type(refused.value) is SandboxError
    finally:
        await nowhere.close()
        await wrong.close()


def test_both_ports_refuse_requests_without_the_token(node: NodeAgent) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": node.token}):
        answer = httpx.post(node.url + "/node/v1/list_sandboxes", json={}, headers=headers)
        assert answer.status_code == 401
        assert answer.json()["code"] == "Unauthorized"
    envd = {"E2b-Sandbox-Id": "whatever", "E2b-Sandbox-Port": "49983"}
    for headers in ({}, {"X-Sandboxd-Cluster-Token": "wrong"}):
        answer = httpx.get(node.proxy_url + "/health", headers={**envd, **headers})
        assert answer.status_code == 401


def test_a_bad_body_is_a_400_naming_what_is_wrong(node: NodeAgent) -> None:
    answer = httpx.post(node.url + "/node/v1/kill", json={}, headers=node.headers)
    assert (answer.status_code, answer.json()["code"]) == (400, "BadRequest")
    assert "sandbox_id is missing" in answer.json()["message"]
    answer = httpx.post(node.url + "/node/v1/kill", json={"sandbox_id": 3}, headers=node.headers)
    assert answer.status_code == 400


async def test_a_command_runs_through_the_proxy_port(node: NodeAgent, remote: RemoteNode) -> None:
    info = await remote.create(CONFIG)
    assert info.envd_token is not None
    headers = {**node.proxy_headers, "E2b-Sandbox-Id": info.sandbox_id,
               "E2b-Sandbox-Port": "49983", "X-Access-Token": info.envd_token,
               "Content-Type": "application/connect+json"}  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=node.proxy_url, timeout=60) as client:
            answer = await client.post("/process.Process/Start", headers=headers,
                                       content=start_request('echo "$FOO" from inside'))  # fmt: skip
        assert answer.status_code == 200
        assert b"bar from inside" in _stdout(answer.content)
        envs = httpx.get(node.proxy_url + "/envs", headers=headers)
        assert envs.json()["FOO"] == "bar"
    finally:
        await remote.kill(info.sandbox_id)


def test_a_restarted_agent_adopts_its_sandboxes(node: NodeAgent) -> None:
    created = _post(node, "create", config={"template": "base", "timeout_s": 300,
                                            "secure": False, "auto_pause": False})  # fmt: skip
    sandbox_id = created["sandbox_id"]
    node.stop()
    node.start()
    got = _post(node, "get", sandbox_id=sandbox_id)
    assert (got["sandbox_id"], got["running"]) == (sandbox_id, True)
    _post(node, "kill", sandbox_id=sandbox_id)


def _post(node: NodeAgent, operation: str, **arguments: object) -> dict[str, object]:
    answer = node.call_api(operation, arguments)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _stdout(stream: bytes) -> bytes:
    """What the Connect stream's data events carried as stdout, decoded."""
    out = b""
    while len(stream) >= 5:
        _, size = struct.unpack(">BI", stream[:5])
        message = json.loads(stream[5 : 5 + size])
        data = message.get("event", {}).get("data", {})
        if "stdout" in data:
            out += base64.b64decode(data["stdout"])
        stream = stream[5 + size :]
    return out
