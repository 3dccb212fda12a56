"""Fixtures for the SDK's template-build tests (run by tests/builds/test_sdk_builds.py, inside
the fake internet's `uplink`, against `sandboxd serve` there): what the harness made, from
BUILD_FACTS (JSON); the sandboxes a test makes, killed afterwards; and the templates it builds,
deleted afterwards."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from tests.sdk.builds.templates import Facts, delete_template
from tests.sdk.python import sandboxes

if TYPE_CHECKING:
    from collections.abc import Iterator

made = sandboxes.made  # the sandboxes a test makes, killed afterwards


@pytest.fixture(scope="session")
def facts() -> Facts:
    given = os.environ.get("BUILD_FACTS")
    if given is None or "E2B_API_URL" not in os.environ:
        pytest.exit("run by tests/builds/test_sdk_builds.py, inside the fake internet")
    return Facts(**json.loads(given))


@pytest.fixture
def built(made: list[object]) -> Iterator[list[str]]:
    """Names of the templates a test builds (appended by it), deleted afterwards (after its
    sandboxes are killed: a template in use cannot be deleted)."""
    names: list[str] = []
    yield names
    for sandbox in made:
        sandbox.kill()  # type: ignore[attr-defined]
    made.clear()
    for name in names:
        delete_template(name)
