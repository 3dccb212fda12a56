"""What uses layers, as sandboxd records it, for the layer store's one rule of collection
(sandboxd.layers.collect): the builds tagged in the store (snapshots among them), the builds
running (a snapshot being taken among them), the sandboxes on the host (a record under the
sandboxes directory: running, paused, warm) and those paused to disk (their rows in the
store)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.layers.collect import LayerUsers
from sandboxd.layers.portable import resolved
from sandboxd.runtime.spec import read_record
from sandboxd.templates.catalog import tagged_layers

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.store.interface import Store


def layer_users(store: Store, sandboxes_dir: Path, root: Path) -> LayerUsers:
    """What stacks layers now, in the state directory `root`. Blocking (reads every sandbox's
    record)."""
    if store.builds(status="building"):
        return LayerUsers(building=True, templates=(), sandboxes=())
    templates = tagged_layers(store, root)
    sandboxes: list[Path] = []
    if sandboxes_dir.is_dir():
        for box_dir in sandboxes_dir.iterdir():
            spec = read_record(box_dir)
            if spec is not None:
                sandboxes.extend(spec.layers)
    for row in store.sandboxes():  # paused to disk: no directory, its record says
        if row.disk_image is not None:
            sandboxes.extend(resolved(p, root) for p in row.disk_image["layers"])
    return LayerUsers(building=False, templates=templates, sandboxes=sandboxes)
