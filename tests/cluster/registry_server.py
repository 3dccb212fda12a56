"""The cluster's registry for tests: Debian's docker-registry (CNCF Distribution) on 127.0.0.1,
a port the kernel picks, its storage and config in a temporary directory of its own
(tests/images/registry.py starts it), stopped by its pid and its directory removed at the end,
or as soon as its start fails."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.images.registry import start_registry

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.images.registry import Registry


@contextlib.contextmanager
def registry_server(
    account: tuple[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[Registry]:
    """A running registry (answering only `account`, user and password, when given), run with
    `prefix` before its command (e.g. in a network namespace's loopback)."""
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is missing: run scripts/install as root")
    dir = Path(tempfile.mkdtemp(prefix="sandboxd-test-registry-"))
    try:
        running = start_registry(dir, account, prefix)
        try:
            yield running
        finally:
            running.stop()
    finally:
        shutil.rmtree(dir)


def registry_url(registry: Registry, repository: str = "") -> str:
    """The URL serve's --registry takes for `registry` (plain http: it is on loopback)."""
    return f"http://{registry.host}/{repository}".rstrip("/")
