"""Fixtures of the cluster's tests: the base template of tests/sandboxd, which the serves they
start boot."""

from __future__ import annotations

from tests.sandboxd.conftest import base_template

__all__ = ["base_template"]
