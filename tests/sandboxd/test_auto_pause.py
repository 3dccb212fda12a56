"""The lifecycle at create over the wire (`autoPause`, `autoPauseMemory`, `autoResume`): the
reference's two refusals, `lifecycle` in GET for running and paused sandboxes, and the pause at
`endAt`: frozen (processes kept), or to disk with `autoPauseMemory: false` (files kept, a new
boot)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.sandboxd.guest_shell import background, sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.sandboxd.test_disk_pause import BOOT_ID, SLEEPERS
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

# The reference's words.
NEEDS_AUTO_PAUSE = "autoPauseMemory=false only applies when autoPause is true."
NO_AUTO_RESUME = (
    "autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume: a "
    "filesystem-only snapshot cannot be auto-resumed by traffic and must be resumed explicitly."
)
PAUSE_S = 120  # how long a broken evictor takes to fail a test, not a speed bound


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("auto-pause"), base_template, NO_NETWORK) as s:
        yield s


def create(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post("/v2/sandboxes", json={"templateID": "base", "timeout": 300, **body})


def lifecycle(api: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    info: dict[str, Any] = api.get(f"/sandboxes/{sandbox_id}").json()
    return dict(info["lifecycle"])


def test_a_filesystem_auto_pause_is_refused_without_auto_pause_or_with_auto_resume(
    server: Sandboxd,
) -> None:
    with server.client() as api:
        for body, message in (
            ({"autoPauseMemory": False}, NEEDS_AUTO_PAUSE),
            ({"autoPause": False, "autoPauseMemory": False}, NEEDS_AUTO_PAUSE),
            ({"autoPause": True, "autoPauseMemory": False, "autoResume": {"enabled": True}},
             NO_AUTO_RESUME),
        ):  # fmt: skip
            refused = create(api, **body)
            assert refused.status_code == 400, body
            assert refused.json() == {"code": 400, "message": message}
        # autoResume without autoPause is accepted (inert), and shown.
        created = create(api, autoResume={"enabled": True})
        assert created.status_code == 201, created.text
        sid = created.json()["sandboxID"]
        assert lifecycle(api, sid) == {"autoResume": True, "onTimeout": "kill"}
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        plain = create(api).json()["sandboxID"]
        assert lifecycle(api, plain) == {"autoResume": False, "onTimeout": "kill"}
        assert api.delete(f"/sandboxes/{plain}").status_code == 204


def paused(api: httpx.Client, sandbox_id: str, mode: str) -> None:
    """Shorten the sandbox's life to 1 s and wait for its auto-pause to finish in `mode`."""
    assert api.post(f"/sandboxes/{sandbox_id}/timeout", json={"timeout": 1}).status_code == 204
    wait_until(
        lambda: api.get(f"/sandboxes/{sandbox_id}").json().get("pauseMode") == mode,
        PAUSE_S,
        f"the sandbox to pause itself ({mode}) at its end",
    )


def test_auto_pause_at_the_end_keeps_the_processes(server: Sandboxd) -> None:
    with server.client() as api:
        created = create(api, autoPause=True, autoResume={"enabled": True})
        assert created.status_code == 201, created.text
        sid, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
        assert lifecycle(api, sid) == {"autoResume": True, "onTimeout": "pause"}
        background(server, sid, "sleep 3600", token)
        sleepers = sh(server, sid, SLEEPERS, token)
        boot_before = sh(server, sid, BOOT_ID, token)
        paused(api, sid, "full")
        assert api.get(f"/sandboxes/{sid}").json()["state"] == "paused"
        assert lifecycle(api, sid) == {"autoResume": True, "onTimeout": "pause"}
        assert api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
        assert sh(server, sid, SLEEPERS, token) == sleepers
        assert sh(server, sid, BOOT_ID, token) == boot_before
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def test_auto_pause_without_memory_pauses_to_disk_at_the_end(server: Sandboxd) -> None:
    with server.client() as api:
        created = create(api, autoPause=True, autoPauseMemory=False)
        assert created.status_code == 201, created.text
        sid, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
        sh(server, sid, "echo persisted > /home/user/marker", token)
        boot_before = sh(server, sid, BOOT_ID, token)
        paused(api, sid, "filesystem")
        assert api.get(f"/sandboxes/{sid}").json()["state"] == "paused"
        assert lifecycle(api, sid) == {"autoResume": False, "onTimeout": "pause"}
        # Recorded paused before it leaves the host: then nothing of it is left but its layer.
        wait_until(lambda: not server.traces(sid), PAUSE_S, "the paused sandbox to leave the host")
        resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        assert resumed.json()["envdAccessToken"] == token
        assert sh(server, sid, "cat /home/user/marker", token) == "persisted\n"
        assert sh(server, sid, BOOT_ID, token) != boot_before
        assert lifecycle(api, sid) == {"autoResume": False, "onTimeout": "pause"}
        # The kind stays with the sandbox: its next end pauses it to disk again.
        sh(server, sid, "echo again > /home/user/second", token)
        paused(api, sid, "filesystem")
        assert api.post(f"/sandboxes/{sid}/resume", json={"timeout": 60}).status_code == 201
        assert sh(server, sid, "cat /home/user/marker /home/user/second", token) == (
            "persisted\nagain\n"
        )
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
