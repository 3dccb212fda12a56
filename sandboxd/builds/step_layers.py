"""The layer a build step's cache key names in the layer store: `step-KEY`, or one of its own
(`step-KEY-RANDOM`) when a forced step makes it again (a layer never changes once made:
templates stack it), with a file `.latest-KEY` beside the layers naming the newest."""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from sandboxd.layers.store import NEW_PREFIX

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore

LATEST_PREFIX = ".latest-"


def latest(layers: LayerStore, key: str) -> str | None:
    """The name of the newest step layer made for `key`, if it is still there."""
    try:
        name = _pointer(layers, key).read_text()
    except FileNotFoundError:
        name = f"step-{key}"
    return next((n for n in (name, f"step-{key}") if layers.find(n) is not None), None)


def fresh_name(layers: LayerStore, key: str) -> str:
    """A name for a new step layer of `key`."""
    name = f"step-{key}"
    return f"{name}-{secrets.token_hex(4)}" if layers.path(name).exists() else name


def point(layers: LayerStore, key: str, name: str) -> None:
    """`name` is the newest layer for `key`."""
    pointer = _pointer(layers, key)
    tmp = pointer.with_name(f"{NEW_PREFIX}{pointer.name}-{secrets.token_hex(4)}")
    tmp.write_text(name)
    os.replace(tmp, pointer)


def _pointer(layers: LayerStore, key: str) -> Path:
    return layers.dir / f"{LATEST_PREFIX}{key}"
