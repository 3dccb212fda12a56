"""Fixtures: real envd daemons on loopback and clients for them.

`envd` is one daemon shared by the session: tests using it must leave its state (token,
env vars, default user) as they found it. Tests that change state ask `envd_factory` for a
daemon of their own. Every daemon's log is checked for tracebacks when it stops.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests import prebuild
from tests.envd_process import TRACEBACK_MARKER, EnvdProcess, start_envd
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator


def _stop_and_check(daemon: EnvdProcess) -> None:
    daemon.stop()
    logs = daemon.logs()
    assert TRACEBACK_MARKER not in logs, f"envd logged a traceback:\n{logs}"


@pytest.fixture(scope="session")
def envd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvdProcess]:
    daemon = start_envd(tmp_path_factory.mktemp("envd-logs"))
    yield daemon
    _stop_and_check(daemon)


@pytest.fixture
def envd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., EnvdProcess]]:
    """Start fresh daemons (with extra flags or env) for tests that change daemon state."""
    started: list[EnvdProcess] = []

    def factory(*flags: str, env: dict[str, str] | None = None) -> EnvdProcess:
        daemon = start_envd(tmp_path_factory.mktemp("envd-logs"), *flags, env=env)
        started.append(daemon)
        return daemon

    yield factory
    for daemon in started:
        _stop_and_check(daemon)


@pytest.fixture
def http(envd: EnvdProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=envd.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Debian's PostgreSQL, started at the first test that asks for a database and stopped by
    its pid at the end of the run (tests/store/postgres_server.py)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database of its own."""
    return postgres_server.create_database()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        prebuild.order(items)
        return
    skip = pytest.mark.skip(reason="needs root (euid 0)")
    for item in items:
        if item.get_closest_marker("root"):
            item.add_marker(skip)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A fresh directory every user may enter and write (pytest's tmp_path parents are 0700,
    which would hide it from `user`)."""
    d = Path(tempfile.mkdtemp(prefix="envd-test-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    """Builds before the test's timeout starts (pytest-timeout's wrapper runs inside this one)."""
    prebuild.build_for(item)
    yield
