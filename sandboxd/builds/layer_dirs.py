"""The built layers: each a read-only directory `DIR/NAME`, named by what made it (a step's
cache key, an image's provisioning), made once. Whatever fills one makes it whole or not at all
(sandboxd.builds.entries.building: a `.new-` directory beside, renamed into place), so no
half-made layer is ever seen, and two builds making the same layer at once both end with one."""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from sandboxd.host.overlay import VIEW_PREFIX
from sandboxd.host.removal import detach_mounts, remove_tree

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

NEW_PREFIX = ".new-"  # sandboxd.builds.entries.building's
LATEST_PREFIX = ".latest-"  # a file naming the newest layer made for a step's key


class LayerDirs:
    def __init__(self, dir: Path) -> None:
        self.dir = dir

    def path(self, name: str) -> Path:
        return self.dir / name

    def has(self, name: str) -> bool:
        return (self.dir / name).is_dir()

    def latest(self, key: str) -> str | None:
        """The name of the newest step layer made for `key`, if it is still there."""
        try:
            name = (self.dir / f"{LATEST_PREFIX}{key}").read_text()
        except FileNotFoundError:
            name = f"step-{key}"
        for candidate in (name, f"step-{key}"):
            if self.has(candidate):
                return candidate
        return None

    def fresh_name(self, key: str) -> str:
        """A name for a new step layer of `key`: `step-KEY`, or one of its own when a forced
        step makes it again (a layer is never changed once made: templates stack it)."""
        name = f"step-{key}"
        return f"{name}-{secrets.token_hex(4)}" if (self.dir / name).exists() else name

    def point(self, key: str, name: str) -> None:
        """`name` is the newest layer for `key`."""
        pointer = self.dir / f"{LATEST_PREFIX}{key}"
        tmp = pointer.with_name(f"{NEW_PREFIX}{pointer.name}-{secrets.token_hex(4)}")
        tmp.write_text(name)
        os.replace(tmp, pointer)

    def make(self, name: str, fill: Callable[[Path], None]) -> Path:
        """`DIR/name`, made by `fill(path)` (which makes that directory whole or not at all)
        unless it exists. Blocking. Raises what `fill` raises."""
        dest = self.dir / name
        if dest.is_dir():
            return dest
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fill(dest)
        except FileExistsError:  # made meanwhile by another build: theirs is the same
            if not dest.is_dir():
                raise
        return dest

    def remove_leftovers(self) -> None:
        """What builds a crash interrupted left: `.new-` layers and the `.view-` mounts of
        provisioning and COPY steps (sandboxd.host.overlay.read_only_view)."""
        if self.dir.is_dir():
            for entry in self.dir.iterdir():
                if entry.name.startswith((NEW_PREFIX, VIEW_PREFIX)):
                    detach_mounts(entry)
                    remove_tree(entry)
