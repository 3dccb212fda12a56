"""Fixtures for driving the e2b Python SDK against envd.

In debug mode (E2B_DEBUG=true) the SDK skips the E2B API and talks straight to envd on
localhost:49983, assuming envd version 99.99.99. scripts/test-sdk starts that shared daemon.
Tests that change a daemon's state (access token, /init env vars) or restart it get a private
daemon on a free port instead, reached through the SDK's `sandbox_url` option.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox

from tests.sdk.python.daemon import SHARED_ENVD_URL, Daemon

if TYPE_CHECKING:
    from collections.abc import Iterator

os.environ["E2B_DEBUG"] = "true"


@pytest.fixture(scope="session", autouse=True)
def _shared_envd_is_up() -> None:
    try:
        httpx.get(f"{SHARED_ENVD_URL}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as e:
        pytest.exit(
            f"envd is not answering on {SHARED_ENVD_URL} (start it with scripts/test-sdk): {e}"
        )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox.create()


@pytest.fixture
async def async_sandbox() -> AsyncSandbox:
    return await AsyncSandbox.create()


@pytest.fixture
def workdir() -> Iterator[str]:
    """A fresh directory every user may write to, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="sdk-e2e-"))
    path.chmod(0o777)
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A private envd on a free port, stopped afterwards."""
    d = Daemon(log_path=tmp_path / "envd.log")
    d.start()
    try:
        yield d
    finally:
        d.stop()
        assert d.tracebacks() == [], d.log_text()
