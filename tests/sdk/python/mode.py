"""Which way the suite reaches envd, and the marks that keep each test to the mode it needs.

Debug mode (scripts/test-sdk): E2B_DEBUG=true, no control API, the SDK talks straight to envd on
localhost:49983, and commands run on this host. Normal mode (scripts/test-sandboxd-sdk): the SDK
calls the control API at E2B_API_URL and reaches real sandboxes through E2B_SANDBOX_URL, as it
does against E2B; it is chosen by setting E2B_API_URL.
"""

from __future__ import annotations

import os

import pytest

NORMAL_MODE = bool(os.environ.get("E2B_API_URL"))
if not NORMAL_MODE:
    os.environ["E2B_DEBUG"] = "true"

# Who runs commands and owns new files by default: envd's own default (root) in debug mode, the
# `user` the control plane's /init names in a real sandbox.
DEFAULT_USER = "user" if NORMAL_MODE else "root"
DEFAULT_HOME = "/home/user" if NORMAL_MODE else "/root"

debug_only = pytest.mark.skipif(
    NORMAL_MODE, reason="drives private envd daemons directly (debug mode: scripts/test-sdk)"
)
normal_only = pytest.mark.skipif(
    not NORMAL_MODE,
    reason="needs the control API and real sandboxes (normal mode: scripts/test-sandboxd-sdk)",
)
