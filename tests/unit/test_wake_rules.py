"""The rules of a wake by traffic (sandboxd.lifecycle.wake): whose create enabled it, how long a
woken sandbox runs, which token each port needs, and the wait for a transition under way."""

from __future__ import annotations

import asyncio

import pytest

from sandboxd.errors import StillTransitioning, WakeRefused
from sandboxd.lifecycle.ingress import Credentials, Ingress
from sandboxd.lifecycle.lifetimes import Lifetimes
from sandboxd.lifecycle.sandbox import Sandbox
from sandboxd.lifecycle.wake import auto_resumes, check_credentials, held
from sandboxd.store.rows import SandboxRow

pytestmark = pytest.mark.anyio
ENVD, TRAFFIC = "e" * 64, "t" * 64
MAX_S = 3600


def paused(timeout_s: int = 300, **options: object) -> Sandbox:
    row = SandboxRow("s1", "base", None, "paused", 1, 2, timeout_s, True, True, 2, 512, 0, "0.1",
                     options=dict(options))  # fmt: skip
    return Sandbox(row, None, ENVD, Ingress(TRAFFIC))


def test_only_a_create_that_enabled_it_auto_resumes() -> None:
    assert auto_resumes(paused(autoResume={"enabled": True}))
    assert not auto_resumes(paused(autoResume={"enabled": False}))
    assert not auto_resumes(paused())


@pytest.mark.parametrize(("timeout_s", "runs_s"), [(3, 60), (300, 300), (7200, MAX_S)])
def test_a_woken_sandbox_runs_its_create_s_timeout_within_a_minute_and_the_max(
    timeout_s: int, runs_s: int
) -> None:
    assert Lifetimes(MAX_S).woken(timeout_s) == runs_s


@pytest.mark.parametrize(
    ("port", "credentials", "fits"),
    [
        (49983, Credentials(ENVD, None), True),
        (49983, Credentials(None, TRAFFIC), False),
        (49983, Credentials("0" * 64, None), False),
        (8000, Credentials(None, TRAFFIC), True),
        (8000, Credentials(ENVD, None), False),
        (8000, Credentials(None, TRAFFIC[:-1]), False),
    ],
)
def test_each_port_needs_its_own_token(port: int, credentials: Credentials, fits: bool) -> None:
    if fits:
        check_credentials(paused(), port, credentials)
    else:
        with pytest.raises(WakeRefused):
            check_credentials(paused(), port, credentials)


def test_without_tokens_any_request_wakes_it() -> None:
    public = paused()
    public.token, public.ingress = None, Ingress()
    check_credentials(public, 49983, Credentials())
    check_credentials(public, 8000, Credentials())


async def test_a_transition_still_under_way_after_the_wait_is_refused() -> None:
    lock = asyncio.Lock()
    async with lock:
        with pytest.raises(StillTransitioning):
            async with held(lock, "s1", wait_s=0.05):
                pass
    async with held(lock, "s1", wait_s=0.05):  # free again: taken, and given back
        assert lock.locked()
    assert not lock.locked()
