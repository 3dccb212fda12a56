"""Teams through the SDK (normal mode): two API keys of two teams on one sandboxd, the suite's
own (the default team's) and one of another team (scripts/test-sandboxd-sdk makes it with
`sandboxd team create` and `api-key create --team`, and passes it as SANDBOXD_OTHER_TEAM_KEY).
Each key lists only its team's sandboxes; the other team's are unknown to it."""

from __future__ import annotations

import os

import pytest
from e2b import Sandbox, SandboxNotFoundException

from tests.sdk.python.mode import normal_only

pytestmark = normal_only


def listed(**opts: str) -> set[str]:
    paginator = Sandbox.list(**opts)
    found: set[str] = set()
    while paginator.has_next:
        found |= {s.sandbox_id for s in paginator.next_items()}
    return found


def test_each_key_lists_and_reaches_only_its_teams_sandboxes() -> None:
    other = os.environ["SANDBOXD_OTHER_TEAM_KEY"]
    mine = Sandbox.create()
    theirs = Sandbox.create(api_key=other)
    try:
        assert mine.sandbox_id in listed()
        assert theirs.sandbox_id not in listed()  # the suite's other tests run beside this one
        assert listed(api_key=other) == {theirs.sandbox_id}
        with pytest.raises(SandboxNotFoundException):
            Sandbox.get_info(mine.sandbox_id, api_key=other)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.connect(mine.sandbox_id, api_key=other)
        assert Sandbox.kill(mine.sandbox_id, api_key=other) is False  # as for an unknown id
        assert mine.is_running()
        assert theirs.commands.run("echo theirs").stdout == "theirs\n"
    finally:
        mine.kill()
        theirs.kill()
