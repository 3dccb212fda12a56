"""Building what a session's tests share before the first of them runs: a build inside a fixture
would count against that test's timeout."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest


def prebuild(session: pytest.Session, fixture: str, what: str, build: Callable[[], object]) -> None:
    """`build()` once collection is done, when running as root and a test uses `fixture`."""
    if os.geteuid() != 0 or not any(fixture in getattr(item, "fixturenames", ())
                                    for item in session.items):  # fmt: skip
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"building or reusing {what}")
    build()
