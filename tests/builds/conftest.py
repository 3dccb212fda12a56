"""Fixtures for the template-build tests."""

from __future__ import annotations

from tests.builds.build_serve import build_net, build_server, envd_artifact, images, uplink_registry

__all__ = ["build_net", "build_server", "envd_artifact", "images", "uplink_registry"]
