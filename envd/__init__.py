"""envd: the in-sandbox daemon serving files, processes, environment and usage stats."""

from __future__ import annotations

__version__ = "0.1.0"
