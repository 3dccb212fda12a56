"""Teams over the wire: one `sandboxd serve`, the default team's key (A, a single user's) and
the key of a team made by `sandboxd team create` (B). For every endpoint, B cannot see, touch or
learn of A's sandbox, template, snapshot or volume: each answers B exactly as for an unknown
one, lists leave them out, and A's things are as they were after B's tries; public templates
(base) boot for both; aliases, volume names and idempotency keys are per team; `GET /teams` and
the team metrics as E2B's."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import TYPE_CHECKING

import httpx
import pytest

from sandboxd.ids import new_sandbox_id
from sandboxd.store.rows import DEFAULT_TEAM_ID
from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.root

TEAM_B = "Team B"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("teams") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK, "--volume-size-mb", "32") as s:
        yield s


def cli(server: Sandboxd, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sandboxd", *args, "--state-dir",
                           str(server.state_dir)], check=False, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def team_b(server: Sandboxd) -> tuple[str, str]:
    """Team B's id and a key of it, made from the command line beside the running serve."""
    team_id = cli(server, "team", "create", TEAM_B)
    assert team_id in cli(server, "team", "ls")
    return team_id, cli(server, "api-key", "create", "--team", TEAM_B)


@pytest.fixture
def a(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture
def b(server: Sandboxd, team_b: tuple[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={"X-API-Key": team_b[1]}, timeout=60) as c:
        yield c


def create(client: httpx.Client, **body: object) -> str:
    response = client.post("/sandboxes", json={"templateID": "base", "timeout": 300, **body})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["sandboxID"]
    return sandbox_id


def answered_as_unknown(client: httpx.Client, method: str, path: str, theirs: str,
                        unknown: str, body: object = None) -> httpx.Response:  # fmt: skip
    """Assert that `path` with another team's id `theirs` gets what it gets with `unknown`,
    the id in the message aside."""
    got = client.request(method, path.format(theirs), json=body)
    expected = client.request(method, path.format(unknown), json=body)
    assert got.status_code == expected.status_code, (method, path, got.text)
    assert got.text.replace(theirs, "ID") == expected.text.replace(unknown, "ID"), (method, path)
    return got


SANDBOX_CALLS: tuple[tuple[str, str, dict[str, object] | None], ...] = (
    ("GET", "/sandboxes/{}", None),
    ("POST", "/sandboxes/{}/connect", {"timeout": 10}),
    ("POST", "/v2/sandboxes/{}/connect", {"timeout": 10}),
    ("POST", "/sandboxes/{}/pause", None),
    ("POST", "/sandboxes/{}/resume", None),
    ("POST", "/sandboxes/{}/timeout", {"timeout": 10}),
    ("PUT", "/sandboxes/{}/network", {"denyOut": ["0.0.0.0/0"]}),
    ("GET", "/sandboxes/{}/metrics", None),
    ("GET", "/sandboxes/{}/logs", None),
    ("GET", "/v2/sandboxes/{}/logs", None),
    ("POST", "/sandboxes/{}/snapshots", {"name": "stolen"}),
    ("POST", "/sandboxes/{}/fork", {}),
    ("DELETE", "/sandboxes/{}", None),
)


def test_another_teams_sandbox_is_as_unknown_for_every_call(
    a: httpx.Client, b: httpx.Client
) -> None:
    mine = create(a, metadata={"who": "a"})
    before = a.get(f"/sandboxes/{mine}").json()
    assert a.get(f"/sandboxes/{mine}/metrics").status_code == 200
    for method, path, body in SANDBOX_CALLS:
        got = answered_as_unknown(b, method, path, mine, new_sandbox_id(), body)
        assert got.status_code == 404 or got.json() == [], (method, path, got.text)
    after = a.get(f"/sandboxes/{mine}").json()
    assert after["state"] == "running"
    assert after["endAt"] == before["endAt"]  # B's timeout and connect did nothing
    assert a.get("/snapshots").json() == []  # nor its snapshot
    for path in ("/sandboxes", "/v2/sandboxes"):
        assert [s["sandboxID"] for s in a.get(path).json()] == [mine]
        assert b.get(path).json() == []
    assert b.get("/v2/sandboxes", params={"template": "base"}).json() == []
    theirs = create(b)  # base is public: B boots it too
    assert [s["sandboxID"] for s in b.get("/sandboxes").json()] == [theirs]
    assert a.get(f"/sandboxes/{theirs}").status_code == 404
    for client, sandbox_id in ((a, mine), (b, theirs)):
        assert client.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_idempotency_keys_are_per_team(a: httpx.Client, b: httpx.Client) -> None:
    key = {"Idempotency-Key": "same-key-" + uuid.uuid4().hex}
    made = [c.post("/sandboxes", json={"templateID": "base"}, headers=key) for c in (a, b, a)]
    ids = [r.json()["sandboxID"] for r in made]
    assert ids[0] == ids[2] != ids[1]
    for client, sandbox_id in ((a, ids[0]), (b, ids[1])):
        assert client.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_another_teams_snapshot_and_template_are_as_unknown(
    a: httpx.Client, b: httpx.Client
) -> None:
    source = create(a)
    taken = a.post(f"/sandboxes/{source}/snapshots", json={"name": "sandboxd/shot"})
    assert taken.status_code == 201, taken.text
    assert taken.json()["snapshotID"] == "shot:default"
    template_id = a.get("/templates/aliases/shot").json()["templateID"]
    build_id = a.get(f"/templates/{template_id}").json()["builds"][0]["buildID"]
    unknown = "nosuchtemplate0000000"
    for ref in (template_id, "shot"):
        for method, path, body in (
            ("GET", "/templates/{}", None),
            ("GET", "/templates/aliases/{}", None),
            ("GET", "/templates/{}/tags", None),
            ("PATCH", "/templates/{}", {"public": True}),
            ("PATCH", "/v2/templates/{}", {"public": True}),
            ("GET", "/templates/{}/builds/" + build_id + "/status", None),
            ("GET", "/templates/{}/files/" + "0" * 64, None),
            ("DELETE", "/templates/{}", None),
        ):
            got = answered_as_unknown(b, method, path, ref, unknown, body)
            assert got.status_code == 404, (method, path, got.text)
        for name in (ref, unknown):
            tagged = b.post("/templates/tags", json={"target": f"{name}:default", "tags": ["x"]})
            untagged = b.request("DELETE", "/templates/tags",
                                 json={"name": name, "tags": ["default"]})  # fmt: skip
            assert tagged.status_code == untagged.status_code == 404, (tagged.text, untagged.text)
        refused = b.post("/sandboxes", json={"templateID": ref})
        assert refused.status_code == 404
        assert refused.json()["message"] == f"template '{ref}' not found"
    for listing in ("/templates", "/v2/templates"):
        assert template_id not in [t["templateID"] for t in b.get(listing).json()]
        assert template_id in [t["templateID"] for t in a.get(listing).json()]
    assert b.get("/snapshots").json() == []
    assert b.get("/snapshots", params={"sandboxID": source}).json() == []
    assert a.get("/snapshots").json() == [{"snapshotID": "shot:default", "names": ["shot"]}]
    assert a.get(f"/templates/{template_id}").json()["public"] is False  # B's PATCH did nothing
    _b_names_its_own_snapshot_shot(b, template_id)
    started = create(a, templateID="shot")  # A's snapshot and tag are whole
    for sandbox_id in (source, started):
        assert a.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    assert a.delete(f"/templates/{template_id}").status_code == 204


def _b_names_its_own_snapshot_shot(b: httpx.Client, a_template_id: str) -> None:
    """Aliases are per team: B's `shot` is a template of its own; the namespace of its names
    is its slug, not the default team's."""
    source = create(b)
    wrong = b.post(f"/sandboxes/{source}/snapshots", json={"name": "sandboxd/shot"})
    assert wrong.status_code == 400
    assert wrong.json()["message"] == "namespace 'sandboxd' must match your team 'team-b'"
    taken = b.post(f"/sandboxes/{source}/snapshots", json={"name": "team-b/shot"})
    assert taken.status_code == 201, taken.text
    own = b.get("/templates/aliases/shot").json()["templateID"]
    assert own != a_template_id
    assert b.get("/snapshots").json() == [{"snapshotID": "shot:default", "names": ["shot"]}]
    assert b.delete(f"/sandboxes/{source}").status_code == 204
    assert b.delete(f"/templates/{own}").status_code == 204


def test_another_teams_volume_is_as_unknown(a: httpx.Client, b: httpx.Client) -> None:
    mine = a.post("/volumes", json={"name": "data"}).json()
    unknown = str(uuid.uuid4())
    for method in ("GET", "DELETE"):
        got = answered_as_unknown(b, method, "/volumes/{}", mine["volumeID"], unknown)
        assert got.json() == {"code": 404, "message": "Volume not found"}
    assert b.get("/volumes").json() == []
    theirs = b.post("/volumes", json={"name": "data"})  # names are per team
    assert theirs.status_code == 201, theirs.text
    assert [v["volumeID"] for v in a.get("/volumes").json()] == [mine["volumeID"]]
    mounts = {"templateID": "base", "volumeMounts": [{"name": "cache", "path": "/mnt/c"}]}
    a.post("/volumes", json={"name": "cache"})
    refused = b.post("/sandboxes", json=mounts)  # A's volume names no volume of B's
    assert refused.status_code == 400
    assert "volume 'cache' not found" in refused.json()["message"]
    assert a.get(f"/volumes/{mine['volumeID']}").status_code == 200
    for client in (a, b):
        for volume in client.get("/volumes").json():
            assert client.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_teams_and_their_metrics(a: httpx.Client, b: httpx.Client, team_b: tuple[str, str]) -> None:
    team_id, key = team_b
    assert a.get("/teams").json() == [
        {"teamID": DEFAULT_TEAM_ID, "name": "sandboxd", "apiKey": API_KEY, "isDefault": True}
    ]
    assert b.get("/teams").json() == [
        {"teamID": team_id, "name": TEAM_B, "apiKey": key, "isDefault": True}
    ]
    since = {"start": str(int(time.time()))}  # 5 s buckets from here on
    rate = {**since, "metric": "sandbox_start_rate"}
    # A's starts of earlier tests may fall in the first bucket: B's create must add none.
    own_starts = _starts(a, f"/teams/{DEFAULT_TEAM_ID}/metrics", since)
    own_max = a.get(f"/teams/{DEFAULT_TEAM_ID}/metrics/max", params=rate).json()["value"]
    running = b.post("/sandboxes", json={"templateID": "base"}).json()["sandboxID"]
    # Each team's samples and starts are its own: B's sandbox, in none of A's (none run now).
    counted = _bucket_with(b, f"/teams/{team_id}/metrics", since)
    own_then = a.get(f"/teams/{DEFAULT_TEAM_ID}/metrics", params=since).json()
    assert [p["concurrentSandboxes"] for p in own_then if p["timestampUnix"] == counted] == [0]
    assert _starts(a, f"/teams/{DEFAULT_TEAM_ID}/metrics", since) == own_starts
    assert b.get(f"/teams/{team_id}/metrics/max", params=rate).json()["value"] > 0
    assert a.get(f"/teams/{DEFAULT_TEAM_ID}/metrics/max", params=rate).json()["value"] == own_max
    query = {"metric": "concurrent_sandboxes"}
    for client, own, other in ((a, DEFAULT_TEAM_ID, team_id), (b, team_id, DEFAULT_TEAM_ID)):
        for path in (f"/teams/{other}/metrics", f"/teams/{other}/metrics/max"):
            refused = client.get(path, params=query)
            assert refused.status_code == 403
            assert refused.json()["message"] == f"You (team {own}) don't have access to this team"
    bad = b.get(f"/teams/{team_id}/metrics/max", params={"metric": "nope"})
    assert bad.status_code == 400
    assert b.delete(f"/sandboxes/{running}").status_code == 204


def _starts(client: httpx.Client, path: str, since: dict[str, str]) -> float:
    """The team's sandbox starts counted in its buckets since `since`."""
    points: list[dict[str, float]] = client.get(path, params=since).json()
    return sum(p["sandboxStartRate"] for p in points)


def _bucket_with(client: httpx.Client, path: str, since: dict[str, str]) -> int:
    """Wait for a bucket of the team's metrics that counts a running sandbox; its time."""
    found: list[int] = []

    def counted() -> bool:
        points = client.get(path, params=since).json()
        found[:] = [p["timestampUnix"] for p in points if p["concurrentSandboxes"] > 0]
        return bool(found)

    wait_until(counted, 60, "the sampler to count the team's sandbox")
    return found[-1]
