"""The SDK suite runs from its own virtualenv (scripts/test-sdk): the e2b package pins a Connect
runtime older than envd's, so the two cannot share one. The daemon's own test run skips it."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("e2b") is None:
    collect_ignore = ["python"]
