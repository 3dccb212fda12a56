"""The quota of the state disk that the layer store and the build uploads may fill: what the
uploads and every layer (pulled, built, and the files of sandboxes paused to disk, frozen,
snapshotted or forked) take together, measured on disk (allocated blocks, a hard-linked file
once, no other filesystem mounted below counted). An upload is refused once it would pass it,
while it streams; a build step whose layer passes it fails and its layer goes
(sandboxd.builds); a pause, snapshot or fork whose layer passes it is refused and its layer
goes (sandboxd.lifecycle.capture)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from sandboxd.errors import DiskFull, StorageFull

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

OPTION = "--build-storage-mb"


class StorageQuota:
    """What `dirs` may hold together: `limit_bytes`."""

    def __init__(self, dirs: Sequence[Path], limit_bytes: int) -> None:
        self.dirs = tuple(dirs)
        self.limit_bytes = limit_bytes

    def used(self) -> int:
        """The bytes `dirs` take on disk now (a walk: call it off the event loop)."""
        return allocated(self.dirs)

    def room(self) -> int:
        """What may still be written (0 when the quota is used up)."""
        return max(0, self.limit_bytes - self.used())

    def full(self, what: str) -> StorageFull:
        """The error for `what` (an upload, a step) passing the quota."""
        return StorageFull(
            f"{what} would pass the build storage quota of {self.limit_bytes >> 20} MiB "
            f"(uploads and layers, sandboxes' pauses, snapshots and forks among them; serve "
            f"{OPTION})"
        )

    def check(self, what: str) -> None:
        """Raises StorageFull when the quota is used up (or passed)."""
        if self.used() >= self.limit_bytes:
            raise self.full(what)

    def check_layer(self, what: str) -> None:
        """For a sandbox's files kept as a layer (`what`: "pausing sandbox X"...), after it
        was made: raises DiskFull when the quota is passed (the caller removes the layer)."""
        if self.used() > self.limit_bytes:
            raise DiskFull(str(self.full(what)))


def allocated(dirs: Sequence[Path]) -> int:
    """The bytes the trees `dirs` take on disk (allocated blocks, a hard-linked file once, no
    other filesystem mounted below counted). Blocking: a walk."""
    seen: set[tuple[int, int]] = set()
    return sum(_walk(d, seen) for d in dirs)


def _walk(top: Path, seen: set[tuple[int, int]]) -> int:
    try:
        device = os.lstat(top).st_dev
    except FileNotFoundError:
        return 0
    total, pending = 0, [os.fspath(top)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed meanwhile (a collection, a finished upload)
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_dev != device or (st.st_dev, st.st_ino) in seen:
                continue  # another filesystem mounted here (a view), or a link already counted
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                pending.append(entry.path)
    return total
