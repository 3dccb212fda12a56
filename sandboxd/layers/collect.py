"""Collecting layers: the one rule for which layers are in use. A layer is kept while a
template's build (a snapshot is one: the sandbox's layers and its captured files) or a sandbox
on the host stacks it; every other layer goes (a failed or superseded build's too, so a later
build redoes those steps; a deleted snapshot's), but nothing goes while a build runs or a
snapshot is being taken: the layers made so far are no template's yet."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.host.removal import remove_tree

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sandboxd.layers.store import LayerStore

log = logging.getLogger("sandboxd.layers.collect")


@dataclass(frozen=True)
class LayerUsers:
    """What stacks layers now, as each user's owner records it."""

    building: bool  # a build runs, or a snapshot is being taken (its build is `building`)
    templates: Iterable[Path]  # the layers of every template's tagged builds, snapshots too
    sandboxes: Iterable[Path]  # the layers of every sandbox's record (running, paused, warm)


def collect(store: LayerStore, users: LayerUsers) -> list[str]:
    """Remove the layers of `store` no user stacks (none while a build runs); their names.
    Blocking.

    Raises:
        TeardownError: a layer would not go.
    """
    if users.building:
        return []
    kept = {p.resolve() for p in (*users.templates, *users.sandboxes)}
    removed: list[str] = []
    for layer in store.layers():
        if layer.resolve() not in kept:
            remove_tree(layer)
            removed.append(layer.name)
    if removed:
        log.info("collected %d unused layers", len(removed))
    return removed
