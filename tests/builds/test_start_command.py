"""A template's start command as the build's finalize phase watches it, over plain HTTP against
a real `sandboxd serve` (builds over the base template): one that fails ends the build at once
with its exit code and output, where its ready command would only have failed until its
timeout; one that exits 0 having started something leaves the ready command to decide."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.builds.build_flow import run
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[httpx.Client]:
    state = tmp_path_factory.mktemp("start-cmd") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as server, server.client() as api:
        yield api


def test_a_start_command_that_fails_fails_the_build_with_its_code_and_output(
    api: httpx.Client,
) -> None:
    recipe = {"fromTemplate": "base", "steps": [],
              "startCmd": "echo starting the server; no-such-service-ctl start app",
              "readyCmd": "test -e /tmp/never"}  # fmt: skip
    build = run(api, "start-fails", recipe)
    assert build.status["status"] == "error", build.messages
    reason = build.status["reason"]
    assert reason["step"] == "finalize"
    assert "exited with code 127" in reason["message"]
    assert "no-such-service-ctl: command not found" in reason["message"]
    assert "starting the server" in build.messages  # its output, as it came, in the log
    assert "did not succeed within" not in reason["message"]  # not the ready command's timeout


def test_a_start_command_that_exits_0_leaves_the_ready_command_to_decide(
    api: httpx.Client,
) -> None:
    recipe = {"fromTemplate": "base", "steps": [],
              "startCmd": "touch /tmp/up; exit 0",
              "readyCmd": "test -e /tmp/up"}  # fmt: skip
    build = run(api, "start-returns", recipe)
    assert build.status["status"] == "ready", build.messages
