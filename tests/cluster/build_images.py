"""The SDK build suites (tests/sdk/builds) through a gateway of the rig: `python -m
tests.cluster.build_images [--networked] COMMAND...` pushes the build tests' images (Debian's
stage and the busybox-style tree, tests/builds/registry_images.py) to a docker-registry of its
own, where the rig's node agents pull them from (given the envd artifact and that registry as
their Docker Hub mirror), and runs COMMAND through the rig with BUILD_FACTS naming them, as
tests/builds/test_sdk_builds.py runs the suites against serve.

Without `--networked` the rig (tests/cluster/rig.py) is on loopback and its sandboxes have no
network: the steps that install from the fake internet's package index, and the image without
systemd (made from its repository), fail there. With it, the networked rig
(tests/cluster/netrig.py) runs in the fake internet, its registry in `uplink` relayed to every
node, and every suite's test has what it needs."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tests.builds.artifact_cache import ensure_artifact
from tests.builds.build_serve import push_no_systemd_image
from tests.builds.registry_images import push_test_images
from tests.cluster import netrig, rig
from tests.cluster.registry_server import registry_server
from tests.images.registry import start_registry
from tests.network import package_index
from tests.network.fake_internet import INDEX_ADDRESS, running_fake_internet
from tests.sandboxd.template_cache import IMAGE_CACHE

# Where no package index listens: the steps that need one fail as a network-less build does.
NO_INDEX = "127.0.0.1:9"
PACKAGE = {"project": package_index.PROJECT, "module": package_index.MODULE,
           "greeting": package_index.GREETING}  # fmt: skip


def main(argv: list[str]) -> int:
    if argv[:1] == ["--networked"]:
        return networked(argv[1:])
    with tempfile.TemporaryDirectory(prefix="sandboxd-rig-images-") as work:
        registry = start_registry(Path(work))
        try:
            images = push_test_images(registry, Path(work) / "pushed", IMAGE_CACHE)
            facts = {"images": images, "index": NO_INDEX, "indexRoot": str(Path(work) / "index"),
                     "package": PACKAGE}  # fmt: skip
            os.environ["BUILD_FACTS"] = json.dumps(facts)
            return rig.main(argv, _node_flags(registry.host))
        finally:
            registry.stop()


def networked(argv: list[str]) -> int:
    """COMMAND through the networked rig, the images (the one without systemd too) in a
    registry in `uplink`, RUN steps installing from the fake internet's package index."""
    with (
        tempfile.TemporaryDirectory(prefix="sandboxd-netrig-images-") as work,
        running_fake_internet() as net,
        registry_server(prefix=tuple(netrig.inside(net.uplink))) as registry,
    ):
        images = push_test_images(registry, Path(work) / "pushed", IMAGE_CACHE)
        (Path(work) / "no-systemd").mkdir()
        images["no-systemd"] = push_no_systemd_image(registry, net, Path(work) / "no-systemd")
        facts = {"images": images, "index": INDEX_ADDRESS, "indexRoot": str(net.workdir / "index"),
                 "package": PACKAGE}  # fmt: skip
        port = int(registry.host.rsplit(":", 1)[1])
        with netrig.running_networked_cluster(
            net, Path(work), node_flags=_node_flags(registry.host), uplink_ports=(port,)
        ) as cluster:
            return rig.run_through(cluster, argv, BUILD_FACTS=json.dumps(facts))


def _node_flags(registry_host: str) -> tuple[str, ...]:
    """As tests/builds' serve: envd for images without it, the registry as Docker Hub."""
    return ("--envd-artifact", str(ensure_artifact()), "--registry-mirror", registry_host)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
