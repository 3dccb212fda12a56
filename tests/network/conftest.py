"""Fixtures: the fake internet (docs/testing.md, "Network tests"), checked before use and
removed after."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.network.fake_internet import FakeInternet, running_fake_internet

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def fake_internet() -> Iterator[FakeInternet]:
    """A fresh fake internet; its namespaces, processes and files are gone after the test,
    whether it passed or not."""
    with running_fake_internet() as net:
        yield net


@pytest.fixture(scope="module")
def net() -> Iterator[FakeInternet]:
    """One fake internet for a module's tests (serve inside it takes seconds to start)."""
    with running_fake_internet() as net:
        yield net
