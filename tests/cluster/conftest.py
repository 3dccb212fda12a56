"""Fixtures of the cluster tests: the base template and PostgreSQL of tests/sandboxd and
tests/conftest.py, and the fake internet of tests/network."""

from __future__ import annotations

from tests.network.conftest import net
from tests.sandboxd.conftest import base_template

__all__ = ["base_template", "net"]
