"""The built layers: each a read-only directory `DIR/NAME`, named by what made it (a step's
cache key, an image's provisioning), made once. Whatever fills one makes it whole or not at all
(sandboxd.builds.entries.building: a `.new-` directory beside, renamed into place), so no
half-made layer is ever seen, and two builds making the same layer at once both end with one."""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host import libc
from sandboxd.host.removal import detach_mounts, remove_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

NEW_PREFIX = ".new-"  # sandboxd.builds.entries.building's
VIEW_PREFIX = ".view-"
LATEST_PREFIX = ".latest-"  # a file naming the newest layer made for a step's key
# The mount's options are one page; each layer's path is about 100 characters of it.
MAX_OPTIONS = 4000


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

    @contextlib.contextmanager
    def view(self, layers: Sequence[Path]) -> Iterator[Path]:
        """`layers` (lowest first) as one read-only overlay on the host, without an idmap (the
        ids the image has), unmounted and removed when the block ends. Blocking.

        Raises:
            TemplateError: too many layers for one mount's options.
        """
        scratch = self.dir / f"{VIEW_PREFIX}{secrets.token_hex(6)}"
        empty, root = scratch / "empty", scratch / "root"
        lowerdir = ":".join(str(p) for p in reversed([empty, *layers]))  # overlay wants two
        if len(lowerdir) > MAX_OPTIONS:
            raise TemplateError(f"{len(layers)} layers are more than one overlay mount takes")
        for d in (scratch, empty, root):
            d.mkdir(mode=0o700)
        try:
            libc.mount("overlay", str(root), "overlay", f"ro,lowerdir={lowerdir}")
            try:
                yield root
            finally:
                detach_mounts(root)
        finally:
            remove_tree(scratch)

    def remove_leftovers(self) -> None:
        """What builds a crash interrupted left: `.new-` layers and `.view-` mounts."""
        if self.dir.is_dir():
            for entry in self.dir.iterdir():
                if entry.name.startswith((NEW_PREFIX, VIEW_PREFIX)):
                    detach_mounts(entry)
                    remove_tree(entry)
