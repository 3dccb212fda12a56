"""sandboxd: runs E2B-style sandboxes as booted containers with envd inside (this package holds
the runtime layer: templates, cgroups, overlay roots, nspawn and network-namespace sockets)."""

from __future__ import annotations

__version__ = "0.1.0"
