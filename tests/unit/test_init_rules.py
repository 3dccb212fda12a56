"""Pure helpers behind POST /init: body decoding, timestamps, the clock policy, the lock."""

from __future__ import annotations

import asyncio

import pytest

from envd.http.init import acquire_unless_client_gone, clock_needs_setting
from envd.http.init_body import parse_init_body, parse_rfc3339_ns

SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "expected_ns"),
    [
        ("2023-11-14T22:13:20Z", 1_700_000_000 * SECOND),
        ("2023-11-14T22:13:20.5Z", 1_700_000_000 * SECOND + 500_000_000),
        ("2023-11-14T22:13:20.123456789Z", 1_700_000_000 * SECOND + 123_456_789),
        ("2023-11-14T22:13:20.1234567891Z", 1_700_000_000 * SECOND + 123_456_789),
        ("2023-11-15T00:13:20+02:00", 1_700_000_000 * SECOND),
        ("2023-11-14T21:43:20-00:30", 1_700_000_000 * SECOND),
    ],
)
def test_rfc3339_to_unix_ns(text: str, expected_ns: int) -> None:
    assert parse_rfc3339_ns(text) == expected_ns


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-14",
        "2023-11-14T22:13:20",
        "2023-11-14 22:13:20Z",
        "2023-02-30T00:00:00Z",
        "2023-11-14T24:00:00Z",
        "2023-11-14T22:13:60Z",
        "2023-11-14T22:13:20+24:00",
        " 2023-11-14T22:13:20Z",
    ],
)
def test_rfc3339_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        parse_rfc3339_ns(text)


def test_body_fields_and_escaped_token() -> None:
    request = parse_init_body(
        b'{"envVars": {"A": "x\\ny", "B": null}, "accessToken": "t0k", "defaultUser": "user",'
        b' "defaultWorkdir": "", "timestamp": "2023-11-14T22:13:20Z"}'
    )
    assert request.env_vars == {"A": "x\ny", "B": ""}
    assert request.access_token == "t0k"  # noqa: S105  # a test value
    assert request.default_user == "user"
    assert request.default_workdir == ""
    assert request.timestamp_ns == 1_700_000_000 * SECOND
    # Escapes are fine in other strings, never in the token (even if they decode to plain text).
    with pytest.raises(ValueError, match="accessToken"):
        parse_init_body(b'{"accessToken": "\\u0074"}')


def test_clock_policy_matches_the_reference_window() -> None:
    ts = 1_700_000_000 * SECOND
    assert not clock_needs_setting(ts, ts)
    assert not clock_needs_setting(ts - 50_000_000, ts)  # 50 ms behind: tolerated
    assert clock_needs_setting(ts - 50_000_001, ts)
    assert not clock_needs_setting(ts + 5 * SECOND, ts)  # 5 s ahead: tolerated
    assert clock_needs_setting(ts + 5 * SECOND + 1, ts)


class _Client:
    """An ASGI receive channel whose disconnect the test triggers."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, str]:
        await self.gone.wait()
        return {"type": "http.disconnect"}


def test_lock_waiter_gives_up_when_its_client_goes() -> None:
    async def scenario() -> None:
        lock = asyncio.Lock()
        await lock.acquire()
        client = _Client()
        waiter = asyncio.create_task(acquire_unless_client_gone(lock, client.receive))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        client.gone.set()
        assert await asyncio.wait_for(waiter, 5) is False
        lock.release()
        assert not lock.locked()  # the abandoned waiter did not take the lock

    asyncio.run(scenario())


def test_lock_waiter_gets_the_lock_when_released() -> None:
    async def scenario() -> None:
        lock = asyncio.Lock()
        await lock.acquire()
        waiter = asyncio.create_task(acquire_unless_client_gone(lock, _Client().receive))
        await asyncio.sleep(0.01)
        lock.release()
        assert await asyncio.wait_for(waiter, 5) is True
        assert lock.locked()

    asyncio.run(scenario())
