"""Fixtures for the sandbox runtime: the base template (built once, cached by its sources) and a
Runtime whose sandboxes and cgroups are this session's own and are all removed afterwards, even
when a test fails half-way."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.cgroups import CgroupHost
from sandboxd.images import BUILD_FILE, RECIPE, SOURCE_TREE, build_base, lowerdir_in_use
from sandboxd.removal import remove_tree
from sandboxd.runtime import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

# The debootstrap stage is shared with scripts/test-image, so CI debootstraps once.
IMAGE_CACHE = Path(os.environ.get("ENVD_IMAGE_CACHE", "/var/cache/envd-image"))
# What goes into the base template besides the stage: a change to any of it rebuilds it.
TEMPLATE_SOURCES = ("envd", "packaging", "pyproject.toml", "sandboxd/images.py")


def _template_key() -> str:
    digest = hashlib.sha256(RECIPE.encode())
    for top in TEMPLATE_SOURCES:
        path = SOURCE_TREE / top
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                digest.update(str(f.relative_to(SOURCE_TREE)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


def _prune_old_templates(keep: Path) -> None:
    for old in IMAGE_CACHE.glob("sandboxd-base-*"):
        if old != keep and not old.name.endswith(".new") and not lowerdir_in_use(old):
            remove_tree(old)


def ensure_base_template() -> Path:
    """The base template's root filesystem built from this source tree, cached by its sources
    (about 20 s when the debootstrap stage is cached, 2 minutes more when it is not)."""
    key = _template_key()
    dest = IMAGE_CACHE / f"sandboxd-base-{key}"
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_CACHE / ".sandboxd-base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / BUILD_FILE).is_file():
            build_base(dest, IMAGE_CACHE, commit=key[:7])
            _prune_old_templates(dest)
    return dest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the template before the first test needs it: a build inside a fixture would count
    against that test's timeout."""
    if os.geteuid() != 0 or not any("base_template" in getattr(item, "fixturenames", ())
                                    for item in session.items):  # fmt: skip
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("sandboxd tests: building or reusing the base template")
    ensure_base_template()


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
async def runtime(tmp_path: Path, cgroup_parent: str) -> AsyncIterator[Runtime]:
    """A Runtime on a fresh directory; every sandbox left under it is killed afterwards."""
    rt = Runtime(tmp_path / "sandboxes", cgroup_parent=cgroup_parent)
    yield rt
    # adopt() removes what is not running and hands back what is: kill that too.
    for box in Runtime(rt.sandboxes_dir, cgroup_parent=cgroup_parent).adopt():
        await rt.kill(box)
