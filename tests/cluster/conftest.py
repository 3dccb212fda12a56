"""Fixtures of the cluster tests: the base template and PostgreSQL of tests/sandboxd and
tests/conftest.py, and a node agent of this module's own."""

from __future__ import annotations

from tests.sandboxd.conftest import base_template

__all__ = ["base_template"]
