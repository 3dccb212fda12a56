"""What a session's tests share and build once: the base template and the envd artifact. Nothing
is built at collection (`pytest --collect-only` builds nothing): each is built, or found in its
cache, just before the first test that needs it, outside that test's timeout (a build inside a
fixture would count against it). Tests that need neither run first, then those that need only
the base template, then those that need the artifact: on a cold machine the artifact's
interpreter is the longest build, and scripts/test starts it in the background meanwhile."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.builds.artifact_cache import ensure_artifact
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

TESTS = Path(__file__).parent


@dataclass(frozen=True)
class Build:
    fixture: str
    what: str
    build: Callable[[], object]
    # Directories whose tests use it without asking for the fixture (their servers are given
    # the template's path by module fixtures).
    directories: tuple[str, ...] = ()


# In the order they are needed: each later one's tests run after the earlier one's.
BUILDS = (
    Build("base_template", "the base template", ensure_base_template, ("network",)),
    Build("envd_artifact", "the envd artifact", ensure_artifact),
)
_built: set[str] = set()


def needs(item: pytest.Item) -> list[Build]:
    """The builds `item` needs (only as root: the tests that use them are root's)."""
    if os.geteuid() != 0:
        return []
    names = getattr(item, "fixturenames", ())
    parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
    return [b for b in BUILDS
            if b.fixture in names or (parts and parts[0] in b.directories)]  # fmt: skip


def order(items: list[pytest.Item]) -> None:
    """Stable, by module: a module runs with the last of its items' builds, so its module-scoped
    fixtures are still set up once."""
    rank: dict[Path, int] = {}
    for item in items:
        last = max((BUILDS.index(b) + 1 for b in needs(item)), default=0)
        rank[item.path] = max(rank.get(item.path, 0), last)
    items.sort(key=lambda item: rank[item.path])


def build_for(item: pytest.Item) -> None:
    for build in needs(item):
        if build.fixture in _built:
            continue
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"building or reusing {build.what}")
        build.build()
        _built.add(build.fixture)
