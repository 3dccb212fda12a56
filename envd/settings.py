"""Startup settings: fixed for the life of the process. What /init changes lives in state.py."""

from __future__ import annotations

from dataclasses import dataclass

# The envd version we claim to clients. The SDKs and the orchestrator gate features on it;
# 0.6.4 is the newest SDK feature gate and the last version without orchestrator-only routes
# (/freeze, /collapse, /upgrade ...), which this daemon does not serve.
ENVD_VERSION = "0.6.4"

DEFAULT_PORT = 49983
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True, slots=True)
class Settings:
    """Command-line configuration of one envd process."""

    port: int = DEFAULT_PORT
    host: str = "0.0.0.0"
    # "Not in Firecracker": the daemon is not the sandbox VM's own, so it must not touch the
    # host clock and E2B_SANDBOX is "false".
    isnotfc: bool = False
    verbose: bool = False
    cgroup_root: str = DEFAULT_CGROUP_ROOT
    no_cgroups: bool = False
