"""The layer store: each image layer unpacked once, into `DIR/sha256-HEX` (HEX: the blob's
digest), and shared by every image and template that has it. A layer directory is complete
whenever it exists: it is unpacked beside it (`.new-sha256-HEX`) and renamed into place, under a
lock of its own, so concurrent pulls of images sharing a layer unpack it once and never see it
half-made. Nothing writes into a layer afterwards (sandboxes mount them read-only)."""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.host.removal import remove_tree
from sandboxd.images.unpack import unpack

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.images.unpack import Quota

log = logging.getLogger("sandboxd.images.layers")

_NEW, _PULL = ".new-", ".pull-"


class LayerStore:
    """The unpacked layers under `dir` (made 0700: the layers keep their images' owners and
    modes, set-id binaries included, and only root needs to reach them)."""

    def __init__(self, dir: Path, quota: Quota | None = None) -> None:
        self.dir = dir
        self.quota = quota  # what the layers it unpacks may take
        self._locks = dir / ".locks"

    def path(self, digest: str) -> Path:
        return self.dir / digest.replace(":", "-")

    def has(self, digest: str) -> bool:
        return self.path(digest).is_dir()

    def pull_dir(self) -> Path:
        """A new private directory for one pull's download, beside the layers (so a blob is
        never staged on a smaller /tmp); the caller removes it."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=_PULL, dir=self.dir))

    def remove_leftovers(self) -> None:
        """Remove what pulls killed half-way left (downloads, half-unpacked layers). Only when
        no pull runs: at start-up, before the first.

        Raises:
            TeardownError: one would not go.
        """
        if self.dir.is_dir():
            for path in self.dir.iterdir():
                if path.name.startswith((_NEW, _PULL)):
                    remove_tree(path)

    def ensure(self, digest: str, blob: Path, diff_id: str) -> tuple[Path, bool]:
        """The layer `digest`'s directory, unpacked from `blob` unless it already is.

        Returns:
            The directory, and whether this call unpacked it.

        Raises:
            ImageError: the layer cannot be unpacked (nothing of it is left).
        """
        final, made = self.made(
            self.path(digest).name, lambda new: unpack(blob, new, diff_id, self.quota)
        )
        if made:
            log.info("layer %s unpacked", digest)
        return final, made

    def made(self, name: str, make: Callable[[Path], None]) -> tuple[Path, bool]:
        """The layer `DIR/name`, made by `make(new)` (into an empty 0700 directory, which it
        gives its final owner and mode) unless it exists: once, under the layer's lock, then
        renamed into place.

        Returns:
            The directory, and whether this call made it.

        Raises:
            What `make` raises (nothing of the layer is left).
        """
        final = self.dir / name
        if final.is_dir():
            return final, False
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._locks.mkdir(mode=0o700, exist_ok=True)
        with open(self._locks / final.name, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another maker of the same layer: wait for its end
            if final.is_dir():
                return final, False
            new = self.dir / f"{_NEW}{final.name}"
            remove_tree(new)  # a maker killed half-way left it
            new.mkdir(mode=0o700)
            try:
                make(new)
            except BaseException:
                remove_tree(new)
                raise
            os.rename(new, final)
        return final, True
