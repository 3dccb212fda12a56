"""Fixtures for the sandbox runtime: the base template (built once, cached by its sources) and a
runtime whose sandboxes and cgroups are this session's own and are all removed afterwards, even
when a test fails half-way."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import pytest

from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.host.cgroups import CgroupHost
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def base_template() -> Path:
    return ensure_base_template()


@pytest.fixture(scope="session")
def cgroup_parent() -> Iterator[str]:
    """A cgroup parent of this session's own, removed from every hierarchy at the end."""
    name = f"sandboxd-test-{os.getpid()}"
    yield name
    host = CgroupHost.detect()
    for mount in {host.unified, *host.v1.values()}:
        with contextlib.suppress(FileNotFoundError):
            (mount / name).rmdir()


@pytest.fixture
async def runtime(tmp_path: Path, cgroup_parent: str) -> AsyncIterator[NspawnRuntime]:
    """A NspawnRuntime on a fresh directory; every sandbox left under it is killed afterwards."""
    rt = NspawnRuntime(
        tmp_path / "sandboxes", cgroup_parent=cgroup_parent, probe=envd_ready, guest_unit=ENVD_UNIT
    )
    yield rt
    # adopt() removes what is not running and hands back what is: kill that too.
    for box in NspawnRuntime(
        rt.sandboxes_dir, cgroup_parent=cgroup_parent, probe=envd_ready, guest_unit=ENVD_UNIT
    ).adopt():
        await rt.kill(box)
