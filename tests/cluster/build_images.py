"""The SDK build suites (tests/sdk/builds) through a gateway of the rig: `python -m
tests.cluster.build_images COMMAND...` pushes the build tests' images (Debian's stage and the
busybox-style tree, tests/builds/registry_images.py) to a docker-registry of its own on
loopback, where the rig's node agents pull them from (given the envd artifact and that
registry as their Docker Hub mirror), and runs COMMAND through the rig (tests/cluster/rig.py)
with BUILD_FACTS naming them, as tests/builds/test_sdk_builds.py runs
the suites against serve. The rig's sandboxes have no network: the steps that install from the
fake internet's package index, and the image without systemd (made from its repository), are
the fake internet's (tests/builds/test_sdk_builds.py) and fail here."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tests.builds.artifact_cache import ensure_artifact
from tests.builds.registry_images import push_test_images
from tests.cluster import rig
from tests.images.registry import start_registry
from tests.network import package_index
from tests.sandboxd.template_cache import IMAGE_CACHE

# Where no package index listens: the steps that need one fail as a network-less build does.
NO_INDEX = "127.0.0.1:9"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="sandboxd-rig-images-") as work:
        registry = start_registry(Path(work))
        try:
            images = push_test_images(registry, Path(work) / "pushed", IMAGE_CACHE)
            facts = {"images": images, "index": NO_INDEX, "indexRoot": str(Path(work) / "index"),
                     "package": {"project": package_index.PROJECT,
                                 "module": package_index.MODULE,
                                 "greeting": package_index.GREETING}}  # fmt: skip
            os.environ["BUILD_FACTS"] = json.dumps(facts)
            # As tests/builds' serve: envd for images without it, the registry as Docker Hub.
            flags = ("--envd-artifact", str(ensure_artifact()), "--registry-mirror", registry.host)
            return rig.main(argv, flags)
        finally:
            registry.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
