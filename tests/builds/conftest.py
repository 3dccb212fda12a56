"""Fixtures for template builds: the envd artifact (built once, cached by its sources), its envd
layer, image trees that are not ours (a busybox one, Debian's debootstrap stage), the runtime
fixtures of tests/sandboxd (the base template among them), and the SDK build tests' serve in the
fake internet with its registry (tests/builds/build_serve.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandboxd.builds.base_image import ensure_stage
from sandboxd.builds.envd_layer import envd_layer
from sandboxd.builds.provision import provision
from sandboxd.host.removal import remove_tree
from sandboxd.layers.store import LayerStore
from sandboxd.runtime.spec import BootImage
from tests.builds.artifact_cache import ensure_artifact
from tests.builds.build_serve import (
    build_net,
    build_server,
    images,
    no_systemd_image,
    uplink_registry,
)
from tests.builds.trees import glibc_tree
from tests.sandboxd.conftest import base_template, cgroup_parent, runtime
from tests.sandboxd.template_cache import IMAGE_CACHE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "base_template",
    "build_net",
    "build_server",
    "cgroup_parent",
    "images",
    "no_systemd_image",
    "runtime",
    "uplink_registry",
]


@pytest.fixture(scope="session")
def envd_artifact() -> Path:
    return ensure_artifact()


@pytest.fixture(scope="session")
def layer_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LayerStore]:
    store = LayerStore(tmp_path_factory.mktemp("layers"))
    yield store
    remove_tree(store.dir)


@pytest.fixture(scope="session")
def envd_layer_dir(layer_store: LayerStore, envd_artifact: Path) -> Path:
    return envd_layer(layer_store, envd_artifact)


def _provisioned(factory: pytest.TempPathFactory, image: Path, envd: Path) -> BootImage:
    """`image` as a build stacks it: its layer, its provisioning layer, the envd layer."""
    layer = factory.mktemp("provision")
    with LayerStore(layer.parent).view([image]) as view:
        provision(view, layer)
    return BootImage((image, layer, envd), "envd")


@pytest.fixture(scope="session")
def busybox_image(tmp_path_factory: pytest.TempPathFactory, envd_layer_dir: Path) -> BootImage:
    """A busybox:glibc-like root tree (tests/builds/trees.py), provisioned, with envd."""
    root = tmp_path_factory.mktemp("busybox") / "root"
    glibc_tree(root)
    return _provisioned(tmp_path_factory, root, envd_layer_dir)


@pytest.fixture(scope="session")
def debian_stage() -> Path:
    """Debian bookworm's debootstrap stage, shared with the base template (never written)."""
    return ensure_stage(IMAGE_CACHE)


@pytest.fixture(scope="session")
def debian_image(
    tmp_path_factory: pytest.TempPathFactory, debian_stage: Path, envd_layer_dir: Path
) -> BootImage:
    """The stage as an image that is not ours (systemd unused), provisioned, with envd."""
    return _provisioned(tmp_path_factory, debian_stage, envd_layer_dir)
