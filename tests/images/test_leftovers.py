"""A pull killed half-way (sandboxd killed while it unpacks a layer) leaves a download and a
half-made layer beside the layers, never in their place: a later pull of the same layer
unpacks it whole, and remove_leftovers clears the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from sandboxd.images.pull import pull
from tests.images.oci_layout import Layer, layer_digest
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.layers.store import LayerStore

pytestmark = pytest.mark.root

PULL = """
import sys
from pathlib import Path
from sandboxd.layers.store import LayerStore
from sandboxd.images.pull import pull
pull(sys.argv[1], LayerStore(Path(sys.argv[2])), insecure=True)
"""


def test_a_killed_pull_leaves_nothing_in_a_layers_place(
    push: Callable[..., str], store: LayerStore
) -> None:
    big = Layer()
    for i in range(3000):  # long enough to unpack that the kill lands in the middle
        big.file(f"data/{i // 100}/{i}", os.urandom(1024))
    ref = push([big])
    final = store.path(layer_digest(big))
    child = subprocess.Popen([sys.executable, "-c", PULL, ref, str(store.dir)])
    try:
        half_made = store.dir / f".new-{final.name}"
        wait_until(lambda: half_made.is_dir() or child.poll() is not None, 60, "the unpack")
        assert child.poll() is None, "the pull ended before it could be killed"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert not final.exists()
    assert half_made.is_dir()
    assert [p for p in store.dir.iterdir() if p.name.startswith(".pull-")]

    image = pull(ref, store, insecure=True)

    assert image.unpacked == 1
    assert len(list((final / "data").rglob("*"))) == 3000 + 30
    assert not half_made.exists()
    store.remove_leftovers()
    assert sorted(p.name for p in store.dir.iterdir()) == [".locks", final.name]
