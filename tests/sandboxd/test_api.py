"""sandboxd's control API over the wire: a real `sandboxd serve` booting real sandboxes, asked
with plain HTTP (the proxy is not part of these tests: envd is reached through the sandbox's
network namespace)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

import httpx
import pytest

from sandboxd.daemon.machinery import SERVE_NICE
from sandboxd.host.uid_ranges import FIRST_BASE
from tests.sandboxd.refusing_envd import warm_box_refusing_init
from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd, running_sandboxd, wait_gone
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("api") / "state", base_template, NO_NETWORK) as s:
        yield s


@pytest.fixture
def api(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def create(api: httpx.Client, **body: object) -> dict[str, object]:
    response = api.post("/sandboxes", json={"templateID": "base", "timeout": 120, **body})
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


def kill(api: httpx.Client, sandbox_id: object) -> None:
    assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_create_get_list_kill(server: Sandboxd, api: httpx.Client) -> None:
    created = create(api, secure=True, metadata={"who": "test"}, envVars={"A": "1"})
    sandbox_id = str(created["sandboxID"])
    assert sandbox_id.startswith("i")
    assert len(sandbox_id) == 21
    assert created["templateID"] == "base"
    assert created["clientID"] == "6532622b"
    assert len(str(created["envdAccessToken"])) == 64
    # serve's sandbox domain (--domain, default localhost): the SDKs' get_host() builds the
    # sandbox's host name from it, without E2B_DOMAIN.
    assert created["domain"] == "localhost"
    detail = api.get(f"/sandboxes/{sandbox_id}").json()
    assert detail["domain"] == "localhost"
    assert detail["state"] == "running"
    assert detail["metadata"] == {"who": "test"}
    assert detail["envdAccessToken"] == created["envdAccessToken"]
    started = datetime.fromisoformat(detail["startedAt"])
    assert datetime.fromisoformat(detail["endAt"]) - started == timedelta(seconds=120)
    listed = api.get("/v2/sandboxes", params={"metadata": "who=test"})
    assert [s["sandboxID"] for s in listed.json()] == [sandbox_id]
    assert listed.headers["X-Total-Running"] == "1"
    assert [s["sandboxID"] for s in api.get("/sandboxes").json()] == [sandbox_id]
    kill(api, sandbox_id)
    assert server.traces(sandbox_id) == []
    assert api.get(f"/sandboxes/{sandbox_id}").status_code == 404
    assert api.delete(f"/sandboxes/{sandbox_id}").json() == {
        "code": 404,
        "message": f"Sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it",
    }
    assert api.get("/v2/sandboxes", params={"metadata": "who=test"}).json() == []


def test_sandboxd_serves_at_a_higher_priority_than_its_sandboxes(
    server: Sandboxd, api: httpx.Client
) -> None:
    sandbox_id = str(create(api)["sandboxID"])
    assert os.getpriority(os.PRIO_PROCESS, server.pid) == SERVE_NICE < 0
    found = {}
    for pid in server.cgroups(sandbox_id).pids():
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        if comm in ("systemd-nspawn", "systemd"):  # envd's unit sets its own (-20)
            found[comm] = os.getpriority(os.PRIO_PROCESS, pid)
    assert found == {"systemd-nspawn": 0, "systemd": 0}
    kill(api, sandbox_id)


def test_init_gave_envd_the_env_vars_token_and_user(server: Sandboxd, api: httpx.Client) -> None:
    created = create(api, secure=True, envVars={"FROM_CREATE": "yes"})
    sandbox_id, token = str(created["sandboxID"]), str(created["envdAccessToken"])
    status, body = server.envd(sandbox_id, "GET", "/envs", token=token)
    assert status == 200
    assert b'"FROM_CREATE":"yes"' in body.replace(b" ", b"")
    assert server.envd(sandbox_id, "GET", "/envs")[0] == 401  # the token is installed
    kill(api, sandbox_id)


def test_an_insecure_sandbox_has_no_token(server: Sandboxd, api: httpx.Client) -> None:
    created = create(api, secure=False)
    assert "envdAccessToken" not in created
    assert server.envd(str(created["sandboxID"]), "GET", "/envs")[0] == 200
    kill(api, created["sandboxID"])


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-API-Key": "e2b_" + "0" * 40}, {"X-API-Key": "not-a-key"}],
    ids=["missing", "unknown", "malformed"],
)
def test_a_request_without_a_valid_key_is_401(server: Sandboxd, headers: dict[str, str]) -> None:
    for method, path in (("GET", "/v2/sandboxes"), ("POST", "/sandboxes"), ("GET", "/templates")):
        response = httpx.request(method, server.url + path, headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == 401
        assert response.json()["message"]


def test_health_answers_204_without_a_key(server: Sandboxd) -> None:
    """E2B's `GET /health`: no security in its spec (load balancers and probes ask it)."""
    response = httpx.get(server.url + "/health")
    assert (response.status_code, response.content) == (204, b"")
    assert httpx.post(server.url + "/health").status_code == 405


def test_the_key_header_is_case_insensitive(server: Sandboxd) -> None:
    response = httpx.get(server.url + "/templates", headers={"x-api-key": API_KEY})
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"timeout": 10}, "templateID"),
        ({"templateID": "base", "timeout": "10"}, "timeout"),
        ({"templateID": "base", "timeout": -1}, "timeout"),
        ({"templateID": "base", "metadata": {"a": 1}}, "metadata.a"),
        ({"templateID": "base", "metadata": {"a": "b\0c"}}, "metadata"),
        ({"templateID": "base", "envVars": ["A"]}, "envVars"),
        ({"templateID": "base", "secure": "yes"}, "secure"),
        ({"templateID": "base", "network": {"denyOut": ["nowhere"]}}, "denyOut"),
        # E2B's egress rules: no domains in denyOut, no unspecified addresses, domains in
        # allowOut only beside 0.0.0.0/0 in denyOut, and resolvers are IPv4 addresses.
        ({"templateID": "base", "network": {"denyOut": ["example.com"]}}, "denyOut"),
        ({"templateID": "base", "network": {"denyOut": ["0.0.0.0"]}}, "denyOut"),
        ({"templateID": "base", "network": {"allowOut": ["0.0.0.0/8"]}}, "allowOut"),
        (
            {"templateID": "base", "network": {"allowOut": ["a..b"], "denyOut": ["0.0.0.0/0"]}},
            "allowOut",
        ),
        ({"templateID": "base", "network": {"allowOut": ["*.example.com"]}}, "allowOut"),
        ({"templateID": "base", "network": {"dnsServers": ["dns.test"]}}, "dnsServers"),
        (
            {"templateID": "base", "network": {"egressProxy": {"address": "[::1]:1080"}}},
            "egressProxy",
        ),
        (
            {"templateID": "base", "network": {"egressProxy": {"address": "socks.test:0"}}},
            "egressProxy",
        ),
        ({"templateID": "base", "volumeMounts": [{"name": "v"}]}, "volumeMounts.0.path"),
    ],
)
def test_a_bad_create_body_is_400_naming_the_field(
    api: httpx.Client, body: dict[str, object], field: str
) -> None:
    response = api.post("/sandboxes", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == 400
    assert response.json()["message"].startswith("validation error: ")
    assert field in response.json()["message"]


def test_create_timeout_rules(api: httpx.Client) -> None:
    zero = api.post("/sandboxes", json={"templateID": "base", "timeout": 0})
    assert zero.json() == {"code": 400, "message": "Timeout must be greater than 0"}
    huge = api.post("/sandboxes", json={"templateID": "base", "timeout": 10**9})
    assert huge.json() == {"code": 400, "message": "Timeout cannot be greater than 24 hours"}
    not_json = api.post("/sandboxes", content=b"{")
    assert not_json.status_code == 400


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v2/sandboxes?limit=0", "limit"),
        ("/v2/sandboxes?limit=101", "limit"),
        ("/v2/sandboxes?limit=x", "limit"),
        ("/v2/sandboxes?state=frozen", "state"),
        ("/v2/sandboxes?order=up", "order"),
        ("/v2/sandboxes?startedAfter=yesterday", "startedAfter"),
        ("/v2/sandboxes?metadata=a%3Db%3Dc", "metadata"),
        ("/v2/sandboxes?template=base%3Av1", "template"),
        ("/sandboxes/abc/metrics?start=-1", "start"),
        ("/sandboxes/abc/metrics?end=soon", "end"),
    ],
)
def test_a_bad_query_is_400_naming_the_parameter(api: httpx.Client, path: str, name: str) -> None:
    response = api.get(path)
    assert response.status_code == 400
    assert name in response.json()["message"]


def test_bad_ids_tokens_and_ranges_are_400(api: httpx.Client) -> None:
    assert api.get("/v2/sandboxes?nextToken=garbage").json() == {
        "code": 400,
        "message": "Invalid next token",
    }
    assert api.get("/sandboxes/a-b-c").json() == {"code": 400, "message": "Invalid sandbox ID"}
    assert api.get("/sandboxes/Upper").status_code == 400
    ranged = api.get("/sandboxes/abc/metrics?start=10&end=5")
    assert ranged.json() == {"code": 400, "message": "Invalid time range for metrics"}
    no_timeout = api.post("/sandboxes/abc/connect", json={})
    assert no_timeout.status_code == 400
    assert "timeout" in no_timeout.json()["message"]


def test_unknown_sandboxes_and_templates_are_404(api: httpx.Client) -> None:
    for method, path, body in (
        ("GET", "/sandboxes/nonexistingsandbox", None),
        ("DELETE", "/sandboxes/nonexistingsandbox", None),
        ("POST", "/sandboxes/nonexistingsandbox/connect", {"timeout": 10}),
        ("POST", "/sandboxes/nonexistingsandbox/pause", None),
        ("POST", "/sandboxes/nonexistingsandbox/resume", None),
        ("POST", "/sandboxes/nonexistingsandbox/timeout", {"timeout": 10}),
        ("POST", "/sandboxes", {"templateID": "nosuchtemplate"}),
        ("GET", "/templates/nosuchtemplate", None),
        ("GET", "/templates/aliases/nosuchtemplate", None),
        ("DELETE", "/templates/nosuchtemplate", None),
        ("PATCH", "/templates/nosuchtemplate", {"public": True}),
    ):
        response = api.request(method, path, json=body)
        assert response.status_code == 404, (method, path)
        assert response.json()["code"] == 404
    # The legacy id-clientid form names the same (unknown) sandbox.
    assert api.get("/sandboxes/nonexistingsandbox-6532622b").status_code == 404
    # Metrics of an unknown sandbox are an empty history, not an error.
    assert api.get("/sandboxes/nonexistingsandbox/metrics").json() == []


def test_list_filters_order_and_pages(api: httpx.Client) -> None:
    tag = {"metadata": {"suite": "paging"}}
    ids = [str(create(api, **tag)["sandboxID"]) for _ in range(3)]
    query = {"metadata": "suite=paging"}
    newest_first = [s["sandboxID"] for s in api.get("/v2/sandboxes", params=query).json()]
    assert newest_first == ids[::-1]
    first = api.get("/v2/sandboxes", params={**query, "limit": 2})
    assert [s["sandboxID"] for s in first.json()] == ids[:0:-1]
    second = api.get("/v2/sandboxes", params={**query, "limit": 2,
                                               "nextToken": first.headers["X-Next-Token"]})  # fmt: skip
    assert [s["sandboxID"] for s in second.json()] == ids[:1]
    assert "X-Next-Token" not in second.headers
    oldest_first = api.get("/v2/sandboxes", params={**query, "order": "asc"}).json()
    assert [s["sandboxID"] for s in oldest_first] == ids
    bad_order = api.get("/v2/sandboxes", params={**query, "order": "asc",
                                                  "nextToken": first.headers["X-Next-Token"]})  # fmt: skip
    assert bad_order.status_code == 400
    started = api.get(f"/sandboxes/{ids[1]}").json()["startedAt"]
    after = api.get("/v2/sandboxes", params={**query, "startedAfter": started}).json()
    assert [s["sandboxID"] for s in after] == ids[:0:-1]  # inclusive
    assert api.get("/v2/sandboxes", params={**query, "template": "base"}).json()
    assert api.get("/v2/sandboxes", params={**query, "template": "unknown-template"}).json() == []
    assert api.post(f"/sandboxes/{ids[0]}/pause").status_code == 204
    paused = api.get("/v2/sandboxes", params={**query, "state": "paused"})
    assert [s["sandboxID"] for s in paused.json()] == ids[:1]
    assert "X-Total-Running" not in paused.headers
    running = api.get("/v2/sandboxes", params={**query, "state": "running"})
    assert running.headers["X-Total-Running"] == "2"
    assert ids[0] not in [s["sandboxID"] for s in api.get("/sandboxes").json()]  # v1: running
    for sandbox_id in ids:
        kill(api, sandbox_id)


def test_set_timeout_expires_the_sandbox_and_leaves_nothing(
    server: Sandboxd, api: httpx.Client
) -> None:
    sandbox_id = str(create(api)["sandboxID"])
    assert api.post(f"/sandboxes/{sandbox_id}/timeout", json={"timeout": 1}).status_code == 204
    end_at = datetime.fromisoformat(api.get(f"/sandboxes/{sandbox_id}").json()["endAt"])
    assert end_at - datetime.now(UTC) < timedelta(seconds=1.5)
    wait_gone(api, sandbox_id, 10)
    wait_until(lambda: server.traces(sandbox_id) == [], 10, "the sandbox's traces to go")


def test_pause_then_connect_resumes_with_the_same_token(
    server: Sandboxd, api: httpx.Client
) -> None:
    created = create(api, secure=True, envVars={"KEPT": "1"})
    sandbox_id, token = str(created["sandboxID"]), created["envdAccessToken"]
    assert api.post(f"/sandboxes/{sandbox_id}/pause", json={"memory": True}).status_code == 204
    detail = api.get(f"/sandboxes/{sandbox_id}").json()
    assert detail["state"] == "paused"
    with server.held_until_resumed(sandbox_id):  # frozen: silent until resumed
        again = api.post(f"/sandboxes/{sandbox_id}/pause")
        assert again.status_code == 409
        assert api.post(f"/sandboxes/{sandbox_id}/timeout", json={"timeout": 5}).status_code == 404
        resumed = api.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 60})
        assert resumed.status_code == 201
    assert resumed.json()["envdAccessToken"] == token
    assert server.envd(sandbox_id, "GET", "/health")[0] == 204
    status, body = server.envd(sandbox_id, "GET", "/envs", token=str(token))
    assert status == 200
    assert b"KEPT" in body
    # Connect to a running sandbox only extends it.
    end_at = api.get(f"/sandboxes/{sandbox_id}").json()["endAt"]
    assert api.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 5}).status_code == 200
    assert api.get(f"/sandboxes/{sandbox_id}").json()["endAt"] == end_at
    assert api.post(f"/sandboxes/{sandbox_id}/resume").status_code == 409
    assert api.post(f"/sandboxes/{sandbox_id}/pause").status_code == 204
    assert api.post(f"/sandboxes/{sandbox_id}/resume", json={"timeout": 30}).status_code == 201
    kill(api, sandbox_id)


def test_v2_create_and_connect_as_the_sdks_call_them(api: httpx.Client) -> None:
    # The SDKs omit the timeout (300 s) and send no `secure`: every v2 sandbox has a token.
    created = api.post("/v2/sandboxes", json={"templateID": "base", "secure": False})
    assert created.status_code == 201, created.text
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    assert len(token) == 64
    detail = api.get(f"/sandboxes/{sandbox_id}").json()
    started = datetime.fromisoformat(detail["startedAt"])
    assert datetime.fromisoformat(detail["endAt"]) - started == timedelta(seconds=300)
    # Connect with an empty body (timeout 300) extends a running sandbox only.
    connected = api.post(f"/v2/sandboxes/{sandbox_id}/connect", json={})
    assert (connected.status_code, connected.json()["envdAccessToken"]) == (200, token)
    # `memory: false` is ignored on a running sandbox, as the reference does.
    connected = api.post(f"/v2/sandboxes/{sandbox_id}/connect", json={"memory": False})
    assert (connected.status_code, connected.json()["envdAccessToken"]) == (200, token)
    assert api.post(f"/sandboxes/{sandbox_id}/pause").status_code == 204
    resumed = api.post(f"/v2/sandboxes/{sandbox_id}/connect", json={"timeout": 60})
    assert (resumed.status_code, resumed.json()["envdAccessToken"]) == (201, token)
    kill(api, sandbox_id)
    gone = api.post(f"/v2/sandboxes/{sandbox_id}/connect", json={})
    assert gone.status_code == 404
    assert gone.json()["code"] == 404


def test_list_metadata_encoded_twice_as_the_sdks_send_it(api: httpx.Client) -> None:
    metadata = {"odd key": "a/b&c=d%e"}
    sandbox_id = create(api, metadata=metadata)["sandboxID"]
    # What both SDKs send: each key and value percent-encoded, then joined as a query string.
    query = urlencode({quote(k): quote(v) for k, v in metadata.items()})
    listed = api.get("/v2/sandboxes", params={"metadata": query})
    assert [s["sandboxID"] for s in listed.json()] == [sandbox_id]
    assert listed.json()[0]["metadata"] == metadata
    kill(api, sandbox_id)


def test_auto_pause_at_the_end(api: httpx.Client) -> None:
    sandbox_id = str(create(api, timeout=1, autoPause=True)["sandboxID"])
    wait_until(
        lambda: api.get(f"/sandboxes/{sandbox_id}").json()["state"] == "paused",
        10,
        "the sandbox to pause itself",
    )
    kill(api, sandbox_id)


def test_metrics_are_sampled(api: httpx.Client) -> None:
    before = int(time.time())
    sandbox_id = str(create(api)["sandboxID"])
    wait_until(lambda: api.get(f"/sandboxes/{sandbox_id}/metrics").json(), 60, "a first sample")
    # Samples every 5 s land in 5-s buckets (max per bucket): a second point follows.
    points = wait_until(
        lambda: (p := api.get(f"/sandboxes/{sandbox_id}/metrics").json()) and len(p) >= 2 and p,
        60,
        "a second point",
    )
    first = points[0]
    assert set(first) == {"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed",
                          "memTotal", "memCache", "diskUsed", "diskTotal"}  # fmt: skip
    # Sampled since the create began, stamped with its bucket's start (Unix seconds).
    stamps = [p["timestampUnix"] for p in points]
    assert before // 5 * 5 <= stamps[0] < stamps[1] <= int(time.time())
    assert first["memTotal"] > 0
    old = api.get(f"/sandboxes/{sandbox_id}/metrics",
                  params={"start": before - 7200, "end": before - 1800})  # fmt: skip
    assert old.json() == []
    kill(api, sandbox_id)
    assert api.get(f"/sandboxes/{sandbox_id}/metrics").json()  # history outlives the sandbox
    team = api.get("/teams/00000000-0000-4000-8000-000000000001/metrics").json()
    assert any(p["concurrentSandboxes"] >= 1 for p in team)
    assert api.get("/teams/someone-else/metrics").status_code == 403


def test_env_vars_no_command_could_take_are_refused_at_create(api: httpx.Client) -> None:
    """They were accepted (201), and then every command in the sandbox failed."""
    before = api.get("/v2/sandboxes").json()
    for env in ({"A=B": "x"}, {"": "x"}, {"A\u0000B": "x"}, {"A": "x\u0000y"}):
        for path in ("/sandboxes", "/v2/sandboxes"):
            response = api.post(path, json={"templateID": "base", "envVars": env})
            assert response.status_code == 400, (env, response.text)
            assert response.json()["code"] == 400
            assert "envVars" in response.json()["message"]
    assert api.get("/v2/sandboxes").json() == before


def test_unserved_e2b_routes_say_so_and_reach_no_other_route(api: httpx.Client) -> None:
    """`DELETE /templates/tags` (the SDK's Template.remove_tags) was served as the deletion of
    a template called "tags", and the SDK told it succeeded."""
    made = api.post("/v2/templates", json={"alias": "tags", "memoryMB": 256})
    assert made.status_code == 202, made.text
    removed = api.request("DELETE", "/templates/tags", json={"name": "tags", "tags": ["v1"]})
    assert removed.json() == {"code": 404, "message": "template 'tags:v1' not found"}
    assert api.get("/templates/aliases/tags").status_code == 200  # still there
    for method, path in (("POST", "/templates/base/builds/b1"),
                         ("GET", "/templates/base/builds/b1/logs")):  # fmt: skip
        answer = api.request(method, path, json={})
        assert answer.status_code == 501, (method, path, answer.text)
        assert "not supported by sandboxd" in answer.json()["message"]
    assert api.delete(f"/templates/{made.json()['templateID']}").status_code == 204


def test_bodies_past_a_routes_cap_are_a_413_before_they_are_read(
    server: Sandboxd, api: httpx.Client
) -> None:
    """One authenticated 200 MB body took sandboxd to 1.3 GB and stalled /health for 7.8 s."""
    big = {"templateID": "base", "metadata": {"pad": "x" * (2 << 20)}}
    for path in ("/sandboxes", "/v2/sandboxes", "/v2/templates"):
        answer = api.post(path, json=big)
        assert answer.status_code == 413, (path, answer.text)
        assert answer.json()["code"] == 413
    chunks = (b"x" * 65536 for _ in range(64))  # 4 MiB, chunked: no length declared
    answer = api.post("/sandboxes", content=chunks)
    assert answer.status_code == 413, answer.text
    # A declared length past the cap is refused at once: the 200 MB never have to be sent.
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(
            b"POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: 200000000\r\n\r\n{"
            % API_KEY.encode()
        )
        head = raw.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head


def test_bodies_nested_too_deep_are_a_400(api: httpx.Client) -> None:
    """A deeply nested create body was a 500 (RecursionError) with two tracebacks."""
    nested = '{"templateID": "base", "metadata": ' + "[" * 5000 + "]" * 5000 + "}"
    answer = api.post("/sandboxes", content=nested, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert "nests deeper" in answer.json()["message"]


def test_metrics_times_past_what_rfc_3339_writes_are_a_400(api: httpx.Client) -> None:
    """`end=2^62` was a 500 (OverflowError)."""
    team = "/teams/00000000-0000-4000-8000-000000000001/metrics"
    for query in ({"end": 2**62}, {"start": 2**62}, {"end": 10**30}):
        answer = api.get(team, params=query)
        assert answer.status_code == 400, (query, answer.text)
        assert next(iter(query)) in answer.json()["message"]
    assert api.get(team, params={"end": 253_402_300_799}).status_code == 200


def test_an_idempotency_key_makes_one_sandbox(api: httpx.Client) -> None:
    """The SDK retries a create on 502/503/504 with the same Idempotency-Key: a retry, even
    one sent while the first is still booting, must not make a second sandbox."""
    before = {s["sandboxID"] for s in api.get("/v2/sandboxes").json()}
    body = {"templateID": "base", "timeout": 120}

    def create(key: str) -> str:
        answer = api.post("/v2/sandboxes", json=body, headers={"Idempotency-Key": key})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["sandboxID"])

    with ThreadPoolExecutor(3) as pool:  # at once: the later ones wait for the first's boot
        ids = list(pool.map(create, ["key-1"] * 3))
    assert len(set(ids)) == 1
    assert create("key-1") == ids[0]  # and again after it is done
    other = create("key-2")
    assert other != ids[0]
    after = {s["sandboxID"] for s in api.get("/v2/sandboxes").json()} - before
    assert after == {ids[0], other}
    kill(api, ids[0])
    gone = api.post("/v2/sandboxes", json=body, headers={"Idempotency-Key": "key-1"})
    assert gone.status_code == 409, gone.text
    kill(api, other)
    too_long = api.post("/v2/sandboxes", json=body, headers={"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 400


def test_an_unexpected_failure_is_a_500_logged_once(tmp_path: Path, base_template: Path) -> None:
    """Each 500 used to log two tracebacks (the handler's, then uvicorn's)."""
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK) as server:
        wal = server.state_dir / "sandboxd.db-wal"
        subprocess.run(["chattr", "+i", str(wal)], check=True)  # the store cannot commit
        try:
            with server.client() as api:
                answer = api.post("/v2/templates", json={"alias": "unwritable"})
        finally:
            subprocess.run(["chattr", "-i", str(wal)], check=True)
        assert answer.status_code == 500, answer.text
        assert answer.json()["code"] == 500
        assert "internal error" in answer.json()["message"]
        log = server.log.read_text()
        assert log.count("Traceback (most recent call last)") == 1, log[-3000:]
        server.log.write_text(log.replace("Traceback", "(the expected) trace"))


def _ms(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp).timestamp() * 1000)


def test_a_sandboxs_logs_are_its_journal(api: httpx.Client) -> None:
    """`sandbox logs` of the E2B CLI got a 404: both log routes are served from the sandbox's
    own journal, running or paused."""
    sandbox_id = str(create(api)["sandboxID"])
    v1 = api.get(f"/sandboxes/{sandbox_id}/logs").json()
    lines = [json.loads(log["line"]) for log in v1["logs"]]
    assert any(line["logger"] == "envd.server" and "listening" in line["message"]
               for line in lines), lines  # fmt: skip
    assert {line["level"] for line in lines} <= {"debug", "info", "warn", "error"}
    assert [e["message"] for e in v1["logEntries"]] == [line["message"] for line in lines]
    stamps = [_ms(log["timestamp"]) for log in v1["logs"]]
    assert stamps == sorted(stamps)
    later = api.get(f"/sandboxes/{sandbox_id}/logs", params={"start": stamps[-1]}).json()
    assert later["logs"]
    assert all(_ms(log["timestamp"]) >= stamps[-1] for log in later["logs"])
    forward = api.get(f"/v2/sandboxes/{sandbox_id}/logs", params={"limit": 2}).json()["logs"]
    assert [e["message"] for e in forward] == [line["message"] for line in lines[:2]]
    backward = api.get(f"/v2/sandboxes/{sandbox_id}/logs",
                       params={"direction": "backward", "limit": 2}).json()["logs"]  # fmt: skip
    # The journal only grows (systemd may still be finishing the boot): the page is the newest
    # two entries when it was read, so no older than the last two seen before, and in order.
    oldest_first = [e["message"] for e in backward][::-1]
    after = [json.loads(log["line"])["message"]
             for log in api.get(f"/sandboxes/{sandbox_id}/logs").json()["logs"]]  # fmt: skip
    assert len(oldest_first) == 2
    assert any(after[i : i + 2] == oldest_first for i in range(len(lines) - 2, len(after) - 1)), (
        oldest_first, after)  # fmt: skip
    sideways = api.get(f"/v2/sandboxes/{sandbox_id}/logs", params={"direction": "sideways"})
    assert sideways.status_code == 400
    assert api.post(f"/sandboxes/{sandbox_id}/pause").status_code == 204
    assert api.get(f"/v2/sandboxes/{sandbox_id}/logs").json()["logs"]  # paused: still there
    kill(api, sandbox_id)
    assert api.get(f"/sandboxes/{sandbox_id}/logs").status_code == 404


def test_a_create_whose_init_is_refused_fails_at_once_and_is_never_listed(
    tmp_path: Path, base_template: Path
) -> None:
    """A create whose /init envd refused (413 for a 5 MB env) was retried for 10.9 s, listed as
    running all along, before it failed with a 503."""
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK, "--pool", "1") as server:
        waiting = warm_box_refusing_init(server)
        with server.client() as api, ThreadPoolExecutor(1) as pool:
            creating = pool.submit(api.post, "/sandboxes", json={"templateID": "base"})
            listed: set[str] = set()
            while not creating.done():
                listed |= {s["sandboxID"] for s in api.get("/v2/sandboxes").json()}
            answer = creating.result()
            assert answer.status_code == 413, answer.text
            assert "refused /init" in answer.json()["message"]
            assert waiting not in listed
            wait_until(lambda: server.traces(waiting) == [], 30, "the refused sandbox to go")


def test_templates(api: httpx.Client) -> None:
    # base is public: every team boots it ("Teams").
    assert api.get("/templates/aliases/base").json() == {"templateID": "base", "public": True}
    made = api.post("/v2/templates", json={"alias": "small", "cpuCount": 1, "memoryMB": 256})
    assert made.status_code == 202
    template_id = made.json()["templateID"]
    assert made.json()["aliases"] == ["small"]
    assert api.get(f"/templates/{template_id}").json()["builds"][0]["memoryMB"] == 256
    assert template_id in [t["templateID"] for t in api.get("/templates").json()]
    patched = api.patch(f"/templates/{template_id}", json={"public": True})
    assert patched.status_code == 200
    assert patched.json() is None
    # The E2B CLI's `template unpublish` and `publish`: a stored flag, shown in listings.
    for public in (False, True):
        published = api.patch(f"/v2/templates/{template_id}", json={"public": public})
        assert published.status_code == 200, published.text
        assert published.json() == {"names": ["small"]}
        listed = {t["templateID"]: t["public"] for t in api.get("/templates").json()}
        assert listed[template_id] is public
    missing = api.patch("/v2/templates/nosuchtemplate", json={"public": True})
    assert missing.status_code == 404, missing.text
    assert api.patch(f"/v2/templates/{template_id}", json={"public": 3}).status_code == 400
    sandbox = create(api, templateID="small")
    assert sandbox["templateID"] == template_id
    detail = api.get(f"/sandboxes/{sandbox['sandboxID']}").json()
    assert (detail["cpuCount"], detail["memoryMB"]) == (1, 256)
    assert api.delete(f"/templates/{template_id}").status_code == 400  # in use
    kill(api, sandbox["sandboxID"])
    assert api.delete(f"/templates/{template_id}").status_code == 204
    assert api.delete(f"/templates/{template_id}").status_code == 404
    bad = api.post("/v2/templates", json={"alias": "odd", "cpuCount": 3})
    assert bad.status_code == 400
    assert "cpuCount" in bad.json()["message"]
    tiny = api.post("/v2/templates", json={"alias": "tiny", "diskSizeMB": 1})
    assert tiny.status_code == 400
    assert "diskSizeMB" in tiny.json()["message"]


def test_a_templates_disk_size_bounds_its_sandboxes(server: Sandboxd, api: httpx.Client) -> None:
    assert api.get("/templates/base").json()["builds"][0]["diskSizeMB"] == 10240
    made = api.post("/v2/templates", json={"alias": "disk", "memoryMB": 256, "diskSizeMB": 200})
    assert made.status_code == 202, made.text
    assert made.json()["diskSizeMB"] == 200
    sandbox = create(api, templateID="disk")
    sandbox_id = str(sandbox["sandboxID"])
    assert api.get(f"/sandboxes/{sandbox_id}").json()["diskSizeMB"] == 200
    status, body = server.envd(sandbox_id, "GET", "/metrics")
    assert status == 200
    metrics = json.loads(body)
    assert 0 < metrics["disk_total"] <= 200 << 20
    assert metrics["mem_total"] == 256 << 20
    with sqlite3.connect(server.state_dir / "sandboxd.db") as db:
        (uid_base,) = db.execute(
            "SELECT uid_base FROM sandboxes WHERE sandbox_id = ?", (sandbox_id,)
        ).fetchone()
    owner = (server.box_dir(sandbox_id) / "disk/upper").stat().st_uid
    assert uid_base == owner >= FIRST_BASE
    kill(api, sandbox_id)
    assert server.traces(sandbox_id) == []
    assert api.delete(f"/templates/{made.json()['templateID']}").status_code == 204


def test_creates_at_once_each_count_a_spawn(server: Sandboxd, api: httpx.Client) -> None:
    made = api.post("/v2/templates", json={"alias": "counted", "cpuCount": 1, "memoryMB": 256})
    template_id = made.json()["templateID"]
    with ThreadPoolExecutor(3) as pool:  # boots overlap: each create read the count before
        sandboxes = list(pool.map(lambda _: create(api, templateID="counted"), range(3)))
    listed = {t["templateID"]: t for t in api.get("/templates").json()}
    assert listed[template_id]["spawnCount"] == 3
    for sandbox in sandboxes:
        kill(api, sandbox["sandboxID"])
    assert api.delete(f"/templates/{template_id}").status_code == 204


def test_a_create_that_cannot_boot_leaves_nothing(server: Sandboxd, api: httpx.Client) -> None:
    missing = server.state_dir / "no-such-rootfs"
    with sqlite3.connect(server.state_dir / "sandboxd.db") as db:
        db.execute(
            "INSERT INTO templates (template_id, alias, build_id, rootfs, cpu_count, memory_mb, "
            "disk_size_mb, build_status, envd_version, created_at, updated_at) "
            "VALUES ('broken', 'broken', 'b', ?, 1, 256, 0, 'ready', '0.6.4', 0, 0)",
            (str(missing),),
        )
    response = api.post("/sandboxes", json={"templateID": "broken", "timeout": 30})
    assert response.status_code == 500
    assert "no template root filesystem" in response.json()["message"]
    assert list((server.state_dir / "sandboxes").iterdir()) == []
    assert api.get("/v2/sandboxes", params={"template": "broken"}).json() == []


def test_a_kill_that_could_not_remove_everything_is_continued_by_the_next(
    server: Sandboxd, api: httpx.Client
) -> None:
    sandbox_id = str(create(api)["sandboxID"])
    blocker = server.box_dir(sandbox_id) / "blocker"  # a mount the teardown does not expect
    blocker.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "blocker", str(blocker)], check=True)
    try:
        response = api.delete(f"/sandboxes/{sandbox_id}")
        assert response.status_code == 500
        assert "still mounted" in response.json()["message"]
        assert api.get(f"/sandboxes/{sandbox_id}").status_code == 200  # listed until removed
        # but no longer usable
        assert api.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 30}).status_code == 404
    finally:
        subprocess.run(["umount", str(blocker)], check=True)
    kill(api, sandbox_id)
    assert api.get(f"/sandboxes/{sandbox_id}").status_code == 404
    assert not server.box_dir(sandbox_id).exists()
    wait_until(lambda: server.traces(sandbox_id) == [], 10, "the sandbox's traces to go")


def test_api_key_create_prints_a_key_that_works(server: Sandboxd) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxd",
            "api-key",
            "create",
            "--state-dir",
            str(server.state_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    key = done.stdout.strip()
    assert key.startswith("e2b_")
    assert len(key) == 44
    assert key not in (server.state_dir / "sandboxd.db").read_bytes().decode(errors="replace")
    assert httpx.get(server.url + "/templates", headers={"X-API-Key": key}).status_code == 200
