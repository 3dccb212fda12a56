"""What a reference named at its last pull (sandboxd.images.known): a rebuild without `force`
reuses it without asking the registry, so a tag moved since is not seen until a forced pull; a
record whose layers were collected is not used."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandboxd.host.removal import remove_tree
from sandboxd.images.known import KnownImages
from sandboxd.images.pull import pull
from tests.images.oci_layout import Layer, write_layout

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from tests.images.registry import Registry

pytestmark = pytest.mark.root


def test_a_known_reference_is_reused_until_its_layers_go(
    registry: Registry, store: LayerStore, tmp_path: Path
) -> None:
    ref = f"{registry.host}/test/known:v1"
    for version in (b"one", b"two"):
        write_layout(tmp_path / version.decode(), [Layer().file("version", version)],
                     {"Env": [f"V={version.decode()}"]})  # fmt: skip
    registry.push(tmp_path / "one", "test/known:v1")
    first = pull(ref, store, insecure=True)
    known = KnownImages(store.dir)
    assert known.get(ref, None) is None
    known.put(ref, None, first)

    registry.push(tmp_path / "two", "test/known:v1")  # the tag moves
    again = known.get(ref, None)
    assert again is not None
    assert (again.digest, again.layers, again.config) == (first.digest, first.layers, first.config)
    assert known.get(ref, "someone") is None  # another account's pull is another record

    moved = pull(ref, store, insecure=True)  # what a forced build does
    assert (moved.layers[0] / "version").read_bytes() == b"two"
    known.put(ref, None, moved)
    assert known.get(ref, None) == moved.__class__(moved.reference, moved.digest, moved.layers,
                                                   moved.config, 0)  # fmt: skip
    remove_tree(moved.layers[0])  # collected
    assert known.get(ref, None) is None
