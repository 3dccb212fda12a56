"""Sandboxes a normal-mode test makes itself (the lifecycle tests, and tests/sdk/network): the
`made` fixture (import it into a conftest or test module to use it) and `create`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from e2b import Sandbox

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def made() -> Iterator[list[Sandbox]]:
    """Sandboxes a test creates (appended by it), killed afterwards whatever happened."""
    sandboxes: list[Sandbox] = []
    yield sandboxes
    for sandbox in sandboxes:
        Sandbox.kill(sandbox.sandbox_id)


def create(made: list[Sandbox], **options: object) -> Sandbox:
    sandbox = Sandbox.create(**options)
    made.append(sandbox)
    return sandbox
