"""Fixtures: one registry of the session's own on 127.0.0.1, a fresh layer store per test, and a
way to push images made from layers (tests/images/oci_layout.py)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.layers.store import LayerStore
from tests.images.oci_layout import write_layout
from tests.images.registry import ACCOUNT, Registry, start_registry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.images.oci_layout import Layer

_names = itertools.count()


@pytest.fixture(scope="session")
def registry() -> Iterator[Registry]:
    if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
        pytest.fail("docker-registry and skopeo are missing: run scripts/install as root")
    dir = Path(tempfile.mkdtemp(prefix="sandboxd-registry-"))
    try:
        running = start_registry(dir)
        yield running
        running.stop()
    finally:
        shutil.rmtree(dir)


@pytest.fixture(scope="session")
def private_registry() -> Iterator[Registry]:
    """A registry that answers only its account, ACCOUNT."""
    dir = Path(tempfile.mkdtemp(prefix="sandboxd-registry-"))
    try:
        running = start_registry(dir, ACCOUNT)
        yield running
        running.stop()
    finally:
        shutil.rmtree(dir)


@pytest.fixture
def store(tmp_path: Path) -> LayerStore:
    return LayerStore(tmp_path / "layers")


@pytest.fixture
def push(registry: Registry, tmp_path: Path) -> Callable[..., str]:
    """push(layers, config={}, wrong_diff_id=False) -> 127.0.0.1:PORT/test/imageN:latest."""

    def push(layers: list[Layer], config: dict[str, object] | None = None,
             wrong_diff_id: bool = False) -> str:  # fmt: skip
        name = f"test/image{next(_names)}"
        layout = tmp_path / f"oci-{name.replace('/', '-')}"
        write_layout(layout, layers, config or {}, wrong_diff_id=wrong_diff_id)
        registry.push(layout, f"{name}:latest")
        return f"{registry.host}/{name}:latest"

    return push
