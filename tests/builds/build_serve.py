"""Fixtures of the SDK build tests (tests/builds/conftest.py imports them), shared by a session:
the fake internet (its package index is where RUN steps install from), a registry of the test's
own with the Debian and busybox-style images (tests/builds/registry_images.py), both in
`uplink`, and one `sandboxd serve` in `uplink` that builds from them, given the self-contained
envd artifact (conftest's `envd_artifact`) for images without envd."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.removal import remove_tree
from tests.builds import deb_repo
from tests.builds.registry_images import push_image, push_test_images, tree_layer
from tests.images.registry import start_registry
from tests.network.fake_internet import INDEX_ADDRESS, running_fake_internet
from tests.network.served import serving_in_uplink
from tests.sandboxd.template_cache import IMAGE_CACHE

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.images.registry import Registry
    from tests.network.fake_internet import FakeInternet
    from tests.network.served import UplinkSandboxd


@pytest.fixture(scope="session")
def build_net() -> Iterator[FakeInternet]:
    with running_fake_internet() as net:
        yield net


@pytest.fixture(scope="session")
def uplink_registry(build_net: FakeInternet) -> Iterator[Registry]:
    """docker-registry on `uplink`'s 127.0.0.1, where serve pulls from (and where skopeo pushes
    the test images from)."""
    if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
        pytest.fail("docker-registry and skopeo are missing: run scripts/install as root")
    dir = Path(tempfile.mkdtemp(prefix="sandboxd-build-registry-"))
    try:
        running = start_registry(dir, prefix=("nsenter", f"--net={build_net.uplink.path}", "--"))
        yield running
        running.stop()
    finally:
        shutil.rmtree(dir)


@pytest.fixture(scope="session")
def images(uplink_registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """{"debian": ref, "busybox": ref}: 127.0.0.1:PORT/builds/…:latest in `uplink`; "hub": the
    busybox image by a Docker Hub name, which build_server pulls through its mirror."""
    return push_test_images(uplink_registry, tmp_path_factory.mktemp("images"), IMAGE_CACHE)


@pytest.fixture(scope="session")
def no_systemd_image(
    uplink_registry: Registry, build_net: FakeInternet, tmp_path_factory: pytest.TempPathFactory
) -> str:
    return push_no_systemd_image(uplink_registry, build_net, tmp_path_factory.mktemp("no-systemd"))


def push_no_systemd_image(registry: Registry, net: FakeInternet, work: Path) -> str:
    """The stage without systemd, D-Bus and sudo, its only apt source the fake internet's
    repository of them (tests/builds/deb_repo.py), pushed to `registry`: a build's provisioning
    installs them. `work`: an empty directory for the tree and its layer."""
    debs = deb_repo.ensure_debs(IMAGE_CACHE)
    sources = deb_repo.serve_repo(debs, net.workdir / "index", INDEX_ADDRESS)

    def layer(out: Path) -> None:
        root = work / "root"
        deb_repo.no_systemd_tree(IMAGE_CACHE, root, sources)
        try:
            tree_layer(root, out)
        finally:
            remove_tree(root)

    return push_image(registry, work, "builds/no-systemd", layer)


@pytest.fixture(scope="session")
def build_server(
    build_net: FakeInternet,
    envd_artifact: Path,
    uplink_registry: Registry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[UplinkSandboxd]:
    """serve in `uplink`, networked (RUN steps reach the fake internet's package index), with
    the envd artifact for images that do not have envd, and the test's registry (plain HTTP on
    loopback) as its Docker Hub mirror, as a user's local pull-through cache would be."""
    state = tmp_path_factory.mktemp("build-serve") / "state"
    with serving_in_uplink(build_net, state, "--envd-artifact", str(envd_artifact),
                           "--registry-mirror", uplink_registry.host) as server:  # fmt: skip
        yield server
