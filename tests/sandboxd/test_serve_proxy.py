"""sandboxd's one listener serves both halves: the control API, and envd traffic routed to a
sandbox by E2B's headers (as the SDKs send it with E2B_SANDBOX_URL set). Kill and pause cut the
sandbox's proxied streams, and the proxy then answers E2B's 502."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest

from sandboxd.runtime.nspawn import container
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

START = "/process.Process/Start"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(
        tmp_path_factory.mktemp("serve-proxy") / "state", base_template, NO_NETWORK
    ) as s:
        yield s


def _envd_headers(sandbox_id: str, token: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}


def _gone(sandbox_id: str) -> dict[str, object]:
    return {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}


def _start_sleep(client: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    """A Connect server stream of a long command, open until it is cut."""
    body = b'{"process": {"cmd": "/bin/sleep", "args": ["300"]}}'
    envelope = b"\x00" + len(body).to_bytes(4, "big") + body
    request = client.build_request(
        "POST",
        START,
        content=envelope,
        headers={**headers, "Content-Type": "application/connect+json"},
    )
    return client.send(request, stream=True)


@pytest.mark.parametrize("end", ["kill", "pause"])
def test_envd_through_sandboxd_until_the_sandbox_goes(server: Sandboxd, end: str) -> None:
    with server.client() as api, httpx.Client(base_url=server.url, timeout=30) as envd:
        created = api.post(
            "/sandboxes", json={"templateID": "base", "timeout": 120, "secure": True}
        ).json()
        sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
        headers = _envd_headers(sandbox_id, token)
        assert envd.get("/health", headers=headers).status_code == 204
        assert envd.get("/envs", headers=headers).status_code == 200
        assert envd.get("/envs", headers={**headers, "X-Access-Token": "wrong"}).status_code == 401

        stream = _start_sleep(envd, headers)
        assert stream.status_code == 200
        chunks = stream.iter_raw()
        assert next(chunks)  # the start event: the stream is open
        if end == "kill":
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        else:
            assert api.post(f"/sandboxes/{sandbox_id}/pause").status_code == 204
        # Cut at transport level, not ended cleanly: the SDK then probes /health.
        with pytest.raises(httpx.TransportError):
            for _ in chunks:
                pass
        stream.close()
        gone = envd.get("/health", headers=headers)
        assert gone.status_code == 502
        assert gone.json() == _gone(sandbox_id)
        if end == "pause":
            assert (
                api.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 60}).status_code
                == 201
            )
            assert envd.get("/health", headers=headers).status_code == 204
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_control_paths_and_unknown_sandboxes(server: Sandboxd) -> None:
    with server.client() as api, httpx.Client(base_url=server.url, timeout=30) as envd:
        # A chunked body (an iterator): the listener re-frames it for the control API.
        body = json.dumps({"templateID": "base", "timeout": 120, "secure": True}).encode()
        response = api.post("/sandboxes", content=iter([body[:10], body[10:]]),
                            headers={"Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 201, response.text
        created = response.json()
        headers = _envd_headers(created["sandboxID"], created["envdAccessToken"])
        assert envd.post("/init", headers=headers, json={}).status_code == 404
        unknown = envd.get("/health", headers=_envd_headers("nosuchsandbox", "x"))
        assert unknown.status_code == 502
        assert unknown.json() == _gone("nosuchsandbox")
        # The API key goes to the control API only; without one a control call is refused.
        assert envd.get("/v2/sandboxes").status_code == 401
        assert api.delete(f"/sandboxes/{created['sandboxID']}").status_code == 204


# Answers every GET with the Host header it was sent.
ECHO_HOST = """
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
HTTPServer(("0.0.0.0", 8090), Handler).serve_forever()
"""


def _start_in(server: Sandboxd, sandbox_id: str, unit: str, script: str) -> None:
    supervisor = container.supervisor(server.cgroups(sandbox_id))
    leader = container.leader(supervisor) if supervisor else None
    assert leader is not None
    subprocess.run(
        ["nsenter", "-t", str(leader), "-a", "systemd-run", "-q", "--unit", unit,
         "python3", "-c", script],
        check=True, timeout=30,
    )  # fmt: skip


def test_traffic_token_and_masked_host_on_the_sandbox_s_own_ports(server: Sandboxd) -> None:
    """network.allowPublicTraffic false and maskRequestHost, as E2B's proxy applies them: the
    sandbox's own ports need e2b-traffic-access-token (403 JSON without it or with another)
    and get the masked Host; envd's port has its own token and keeps its Host."""
    network = {"allowPublicTraffic": False, "maskRequestHost": "app.example.test:${PORT}"}
    with server.client() as api, httpx.Client(base_url=server.url, timeout=30) as proxy:
        created = api.post(
            "/v2/sandboxes", json={"templateID": "base", "timeout": 120, "network": network}
        ).json()
        sandbox_id, traffic = created["sandboxID"], created["trafficAccessToken"]
        _start_in(server, sandbox_id, "echo-host", ECHO_HOST)
        port = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "8090"}
        with_token = {**port, "e2b-traffic-access-token": traffic}
        wait_until(lambda: proxy.get("/", headers=with_token).status_code == 200, 30,
                   "the server in the sandbox to answer through the proxy")  # fmt: skip
        answer = proxy.get("/", headers=with_token)
        assert answer.content == b"app.example.test:8090"
        missing = proxy.get("/", headers=port)
        assert missing.status_code == 403
        assert missing.json() == {
            "sandboxId": sandbox_id,
            "message": "Sandbox is secured with traffic access token. "
            "Token header 'e2b-traffic-access-token' is missing",
            "code": 403,
        }
        wrong = proxy.get("/", headers={**port, "e2b-traffic-access-token": traffic[::-1]})
        assert wrong.status_code == 403
        assert wrong.json()["message"] == (
            "Sandbox is secured with traffic access token. Provided token is invalid."
        )
        envd = _envd_headers(sandbox_id, created["envdAccessToken"])
        assert proxy.get("/health", headers=envd).status_code == 204
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
