"""The SDK suites run from their own virtualenv (scripts/test-sdk, and for tests/sdk/network
tests/network/test_sdk_network.py): the e2b package pins a Connect runtime older than envd's,
so the two cannot share one. The daemon's own test run skips them."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("e2b") is None:
    collect_ignore = ["python", "network", "builds", "domain"]
