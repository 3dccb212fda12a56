"""Waiting for something the daemon does asynchronously: poll a condition until it holds.

Tests wait on an observable condition instead of sleeping a fixed time and hoping. The
timeouts are generous on purpose: they only bound how long a broken daemon takes to fail a
test, and speed belongs in bench/. Standard library and anyio only: the SDK suite, in its own
virtualenv, uses this module too.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, TypeVar

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

POLL_S = 0.02


class WaitTimeout(AssertionError):
    """The awaited condition did not hold in time (an assertion: the test fails, not errors)."""

    def __init__(self, what: str, timeout_s: float, last: object) -> None:
        super().__init__(f"gave up waiting for {what} after {timeout_s} s (last check: {last!r})")


def wait_until(condition: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Call `condition` until it returns something truthy, and return that.

    `what` names the awaited state for the failure message ("the upload's file to appear").
    Exceptions from `condition` propagate at once (a condition can give up early that way).

    Raises:
        WaitTimeout: `condition` was still falsy after `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise WaitTimeout(what, timeout_s, result)
        time.sleep(POLL_S)
    return result


async def wait_until_async(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """`wait_until` for async tests: sleeps without blocking the event loop, and `condition`
    may be a coroutine function (to ask the daemon over an async client).

    Raises:
        WaitTimeout: `condition` was still falsy after `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise WaitTimeout(what, timeout_s, result)
        await anyio.sleep(POLL_S)
