"""The layer store: every read-only layer a sandbox stacks (an image's unpacked layer, the envd
layer, a build's provisioning, systemd and step layers), each a directory `DIR/NAME` named by
what made it (`sha256-HEX` for an image layer by its digest, `envd-sha256-HEX`, `prov-KEY`,
`sysd-KEY`, `step-KEY`). Names starting with a dot are the store's own and never a layer:
`.new-` layers being made, `.pull-` downloads, `.view-` read-only views, `.locks`, and the
indexes kept beside the layers (`.images`, `.latest-KEY`).

A layer directory is complete whenever it exists: it is made beside (`.new-NAME`) and renamed
into place, under a lock of its own, so two makers of the same layer at once (pulls of images
sharing a layer, builds with the same step) make it once and neither sees it half-made.
Nothing writes into a layer afterwards (sandboxes mount them read-only)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.host import overlay
from sandboxd.host.overlay import VIEW_PREFIX
from sandboxd.host.removal import remove_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from sandboxd.layers.quota import StorageQuota

NEW_PREFIX, PULL_PREFIX = ".new-", ".pull-"


class LayerStore:
    """The layers under `dir` (made 0700: the layers keep their images' owners and modes,
    set-id binaries included, and only root needs to reach them); `quota`: what they may take
    of the state disk with the build uploads (None: no quota), which the makers of layers
    check. The store is the state directory's `layers`: `root`, the state directory, is
    what records' paths are relative to (sandboxd.layers.portable)."""

    def __init__(self, dir: Path, quota: StorageQuota | None = None) -> None:
        self.dir = dir
        self.root = dir.parent
        self.quota = quota
        self._locks = dir / ".locks"

    def path(self, name: str) -> Path:
        """Where the layer `name` is (a digest's `:` becomes `-`: overlayfs takes no `:` in
        a layer's path)."""
        return self.dir / name.replace(":", "-")

    def find(self, name: str) -> Path | None:
        """The layer `name`'s directory, if the store has it."""
        path = self.path(name)
        return path if path.is_dir() else None

    def layers(self) -> list[Path]:
        """Every layer in the store (what is being made not among them), by name."""
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if not p.name.startswith(".") and p.is_dir())

    def next_numbered(self, prefix: str) -> str:
        """`prefix` + a number past those of the store's layers named `prefix` + digits (a
        sandbox's pause or fork layers: whoever numbers them holds the sandbox's lock)."""
        numbers = [p.name.removeprefix(prefix) for p in self.layers() if p.name.startswith(prefix)]
        return f"{prefix}{max((int(n) for n in numbers if n.isdigit()), default=0) + 1}"

    def add(self, name: str, make: Callable[[Path], None]) -> tuple[Path, bool]:
        """The layer `name`, made by `make(new)` unless the store has it: `new` is an empty
        0700 directory, which `make` fills and gives its final owner and mode; once, under
        the layer's lock, then renamed into place. Blocking.

        Returns:
            The directory, and whether this call made it.

        Raises:
            What `make` raises (nothing of the layer is left).
        """
        final = self.path(name)
        if final.is_dir():
            return final, False
        self._ensure_dir()
        with self._lock(final.name):  # another maker of the same layer: wait for its end
            if final.is_dir():
                return final, False
            new = self.dir / f"{NEW_PREFIX}{final.name}"
            remove_tree(new)  # a maker killed half-way left it
            new.mkdir(mode=0o700)
            try:
                make(new)
            except BaseException:
                remove_tree(new)
                raise
            os.rename(new, final)
        return final, True

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        """The exclusive lock of layer `name` for the block. Its file goes when the block ends,
        so that locks do not pile up one per layer ever made: a waiter that wakes on a file
        already unlinked takes a fresh one instead, which is why the inode is compared."""
        self._locks.mkdir(mode=0o700, exist_ok=True)
        path = self._locks / name
        while True:
            lock = open(path, "w")  # noqa: SIM115 -- held across the yield below
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            lock.close()
        try:
            yield
        finally:
            path.unlink()
            lock.close()

    def pull_dir(self) -> Path:
        """A new private directory for one pull's download, beside the layers (so a blob is
        never staged on a smaller /tmp); the caller removes it."""
        self._ensure_dir()
        return Path(tempfile.mkdtemp(prefix=PULL_PREFIX, dir=self.dir))

    @contextlib.contextmanager
    def view(self, lowers: Sequence[Path]) -> Iterator[Path]:
        """`lowers` (lowest first) mounted read-only on the host as a sandbox of them sees
        them (sandboxd.host.overlay.read_only_view), beside the layers, for the block.

        Raises:
            TemplateError: the layers cannot be mounted as one view.
        """
        self._ensure_dir()
        with overlay.read_only_view(lowers, self.dir) as root:
            yield root

    def remove_leftovers(self) -> None:
        """Remove what makers killed half-way left: half-made layers, downloads, mounted
        views. Only when nothing is being made: at start-up.

        Raises:
            TeardownError: one would not go.
        """
        if self.dir.is_dir():
            for entry in self.dir.iterdir():
                if entry.name.startswith((NEW_PREFIX, PULL_PREFIX, VIEW_PREFIX)):
                    remove_tree(entry)  # a view's mount detached first

    def _ensure_dir(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
