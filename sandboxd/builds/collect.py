"""Collecting layers no template uses: every layer directory (pulled, provisioned, built) that
no tag's build and no sandbox on the host (a record under the sandboxes directory: running,
paused, warm) stacks. A failed or superseded build's layers go too, so a later build redoes
those steps. Nothing is collected while a build runs (its layers are not any tag's yet)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.host.removal import remove_tree
from sandboxd.runtime.spec import read_record

if TYPE_CHECKING:
    from sandboxd.store.interface import Store

log = logging.getLogger("sandboxd.builds.collect")


def layers_in_use(store: Store, sandboxes_dir: Path) -> set[Path] | None:
    """The layers to keep; None while a build runs."""
    if store.builds(status="building"):
        return None
    keep: set[Path] = set()
    for template in store.templates():
        for tag in store.tags(template.template_id):
            build = store.build(tag.build_id)
            if build is not None and build.image is not None:
                keep.update(Path(p) for p in build.image["layers"])
    if sandboxes_dir.is_dir():
        for box_dir in sandboxes_dir.iterdir():
            spec = read_record(box_dir)
            if spec is not None:
                keep.update(spec.layers)
    return keep


def collect(layers_dir: Path, keep: set[Path]) -> list[str]:
    """Remove the layer directories of `layers_dir` not in `keep`; their names. Blocking."""
    removed: list[str] = []
    if not layers_dir.is_dir():
        return removed
    kept = {p.resolve() for p in keep}
    for entry in sorted(layers_dir.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or entry.resolve() in kept:
            continue
        remove_tree(entry)
        removed.append(entry.name)
    if removed:
        log.info("collected %d unused layers", len(removed))
    return removed
