"""sandboxd restarted mid-life (SIGTERM, then serve again on the same state), and the warm
pool: each test has a server of its own."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from sandboxd.lifecycle.pool import REFILL_AFTER_TAKE_S
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd, wait_gone
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root


def test_a_restart_keeps_running_and_paused_sandboxes_and_their_ttls(
    tmp_path: Path, base_template: Path
) -> None:
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK) as server:
        with server.client() as api:
            body = {"templateID": "base", "secure": True}
            running = api.post("/sandboxes", json={**body, "timeout": 300}).json()
            paused = api.post("/sandboxes", json={**body, "timeout": 300}).json()
            short = api.post("/sandboxes", json={**body, "timeout": 8}).json()
            assert api.post(f"/sandboxes/{paused['sandboxID']}/pause").status_code == 204
            before = api.get(f"/sandboxes/{running['sandboxID']}").json()
        server.stop()
        # Nothing serves now; the sandboxes go on.
        assert server.envd(running["sandboxID"], "GET", "/health")[0] == 204
        server.start()
        with server.client() as api:
            after = api.get(f"/sandboxes/{running['sandboxID']}").json()
            assert after == before
            assert api.get(f"/sandboxes/{paused['sandboxID']}").json()["state"] == "paused"
            with server.held_until_resumed(paused["sandboxID"]):  # still frozen, not gone
                token = running["envdAccessToken"]
                assert server.envd(running["sandboxID"], "GET", "/envs", token=token)[0] == 200
                resumed = api.post(
                    f"/sandboxes/{paused['sandboxID']}/connect", json={"timeout": 60}
                )
                assert resumed.status_code == 201
            assert resumed.json()["envdAccessToken"] == paused["envdAccessToken"]
            wait_gone(api, short["sandboxID"], 20)  # its TTL fired after the restart
            wait_until(lambda: server.traces(short["sandboxID"]) == [], 10, "its traces to go")


def test_a_create_takes_a_warm_sandbox(tmp_path: Path, base_template: Path) -> None:
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK, "--pool", "1") as server:
        boxes = server.state_dir / "sandboxes"
        wait_until(lambda: boxes.is_dir() and len(list(boxes.iterdir())) == 1, 30, "a warm box")
        warm = next(boxes.iterdir()).name
        # The pool holds the box from the moment its boot logs it up (the same loop step).
        up = f"sandbox {warm} up in"
        wait_until(lambda: up in server.log.read_text(), 30, "the warm box to be up")
        with server.client() as api, ThreadPoolExecutor(1) as background:
            refill = background.submit(_when_there_are, boxes, 2)
            asked = time.monotonic()
            created = api.post("/sandboxes", json={"templateID": "base", "envVars": {"W": "1"}})
            assert created.status_code == 201
            assert created.json()["sandboxID"] == warm
            status, body = server.envd(warm, "GET", "/envs")
            assert status == 200
            assert b'"W"' in body
            # The pool refills in the background, and not at once: its boot would compete with
            # this create's first requests for the CPU.
            assert refill.result() - asked >= REFILL_AFTER_TAKE_S
            assert [s["sandboxID"] for s in api.get("/v2/sandboxes").json()] == [warm]


def _when_there_are(boxes: Path, count: int) -> float:
    """When (time.monotonic()) `boxes` was first seen holding `count` sandboxes."""
    wait_until(lambda: len(list(boxes.iterdir())) == count, 30, f"{count} sandboxes")
    return time.monotonic()
