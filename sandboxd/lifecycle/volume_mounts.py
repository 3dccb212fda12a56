"""The volumes sandboxes mount: a create's `volumeMounts` (`[{name, path}]`, by volume name)
checked against the volume catalog and made the runtime's mounts (each volume's directory on
the host at its path inside), and which volumes a sandbox has mounted, the catalog's `in_use`
(a volume is not deleted under a sandbox: running, frozen, paused to disk or being created).

The create's row keeps its `volumeMounts` as they came (shown by GET); the mounts themselves,
by the volumes' directories, are in the sandbox's runtime record while it is on the host and in
its pause record while it is paused to disk (sandboxd.lifecycle.disk_pause), which its resume
and a restart's adoption boot or find again."""

from __future__ import annotations

import collections
import contextlib
from typing import TYPE_CHECKING, Any

from sandboxd.errors import NotAllowed
from sandboxd.lifecycle.disk_pause import boot_mounts
from sandboxd.runtime.spec import VolumeMount, mount_path_problem

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.volumes.catalog import VolumeCatalog

# The reference's words (infra: api handlers, sandbox_create.go).
NOT_ENABLED = "Volume mounts are not enabled."


def refusal(problems: list[tuple[int, str]]) -> str:
    """One message listing every bad mount by its index, as the reference's
    InvalidVolumeMountsError does."""
    lines = (f"\t- volume mount #{index}: {reason}" for index, reason in problems)
    return "invalid mounts:\n" + "\n".join(lines)


def mounts_of(sandbox: Sandbox) -> tuple[VolumeMount, ...]:
    """What `sandbox` has mounted: its box's mounts, or those its pause to disk will boot."""
    if sandbox.box is not None:
        return sandbox.box.mounts
    return boot_mounts(sandbox.row.disk_image)


class VolumeMounts:
    """`sandboxes()`: every sandbox the lifecycle holds (dying ones too). Without a catalog
    (`attach`), a create with mounts is refused as the reference refuses one where volumes are
    off."""

    def __init__(self, sandboxes: Callable[[], Iterable[Sandbox]]) -> None:
        self._sandboxes = sandboxes
        self._catalog: VolumeCatalog | None = None
        self._creating: collections.Counter[Path] = collections.Counter()

    def attach(self, catalog: VolumeCatalog) -> None:
        """Mount `catalog`'s volumes, and answer its question whether one is in use."""
        self._catalog = catalog
        catalog.in_use = self.in_use

    def resolve(self, wanted: list[dict[str, Any]] | None, team_id: str) -> tuple[VolumeMount, ...]:
        """The runtime's mounts for a create's `volumeMounts` (wire form, validated shape), of
        the team's volumes.

        Raises:
            NotAllowed: volumes are off, or a mount names no volume of the team's, has a path
                that is not one, or a path another one has: one message listing each
                (`refusal`).
        """
        if not wanted:
            return ()
        if self._catalog is None:
            raise NotAllowed(NOT_ENABLED)
        storage = self._catalog.storage
        mounts, problems, used = [], [], set()
        for index, mount in enumerate(wanted):
            name, path = mount["name"], mount["path"]
            volume = self._catalog.named(name, team_id)
            reason = (f"volume '{name}' not found" if volume is None else mount_path_problem(path)
                      or (f"path '{path}' is already used" if path in used else None))  # fmt: skip
            if reason is not None:
                problems.append((index, reason))
                continue
            assert volume is not None  # noqa: S101  # no reason: the volume was found
            used.add(path)
            mounts.append(VolumeMount(storage.mount_path(volume.volume_id), path))
        if problems:
            raise NotAllowed(refusal(problems))
        return tuple(mounts)

    @contextlib.contextmanager
    def creating(self, mounts: Iterable[VolumeMount]) -> Iterator[None]:
        """Count `mounts`' volumes in use for the block: a create's, from its check until its
        sandbox is one of `sandboxes()` (or failed)."""
        dirs = [m.host_dir for m in mounts]
        self._creating.update(dirs)
        try:
            yield
        finally:
            self._creating.subtract(dirs)

    def in_use(self, volume_id: str) -> bool:
        """Whether a sandbox has the volume mounted, or a create is about to."""
        if self._catalog is None:
            return False
        host_dir = self._catalog.storage.mount_path(volume_id)
        if self._creating[host_dir] > 0:
            return True
        return any(m.host_dir == host_dir for s in self._sandboxes() for m in mounts_of(s))
