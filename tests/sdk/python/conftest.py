"""Fixtures for driving the e2b Python SDK against envd, in either mode (see mode.py).

Debug mode: scripts/test-sdk starts the shared envd on localhost:49983, assumed version
99.99.99. Tests that change a daemon's state (access token, /init env vars) or restart it get a
private daemon on a free port instead, reached through the SDK's `sandbox_url` option.

Normal mode: each test module (one flow: files, commands, the async API) gets a sandbox of its
own from the control API, killed when the module is done; lifecycle tests make their own.
Either way each test works in a fresh directory of its own.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox

from tests.sdk.python.daemon import SHARED_ENVD_URL, Daemon
from tests.sdk.python.mode import NORMAL_MODE
from tests.sdk.python.shell import sh

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session", autouse=True)
def _envd_or_api_is_up() -> None:
    url = os.environ["E2B_API_URL"] if NORMAL_MODE else SHARED_ENVD_URL
    try:
        httpx.get(f"{url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as e:
        runner = "scripts/test-sandboxd-sdk" if NORMAL_MODE else "scripts/test-sdk"
        pytest.exit(f"nothing answers on {url} (start it with {runner}): {e}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def _module_sandbox() -> Iterator[Sandbox | None]:
    """Normal mode: this module's sandbox, killed afterwards. Debug mode: none is needed."""
    if not NORMAL_MODE:
        yield None
        return
    sandbox = Sandbox.create()
    try:
        yield sandbox
    finally:
        sandbox.kill()


@pytest.fixture
def sandbox(_module_sandbox: Sandbox | None) -> Sandbox:
    return _module_sandbox or Sandbox.create()


@pytest.fixture
async def async_sandbox(_module_sandbox: Sandbox | None) -> AsyncSandbox:
    if _module_sandbox is None:
        return await AsyncSandbox.create()
    return await AsyncSandbox.connect(_module_sandbox.sandbox_id)


@pytest.fixture
def workdir(sandbox: Sandbox) -> Iterator[str]:
    """A fresh directory every user may write to (in the sandbox: on this host in debug mode),
    removed afterwards."""
    path = sh(sandbox, "d=$(mktemp -d /tmp/sdk-e2e-XXXXXX) && chmod 777 $d && echo $d").strip()
    try:
        yield path
    finally:
        sh(sandbox, f"rm -rf -- {shlex.quote(path)}")


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
