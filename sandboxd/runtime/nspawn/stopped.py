"""Sandboxes whose processes are gone but whose files are left (serve and its sandboxes killed,
the host crashed or rebooted): what a restart keeps of them instead of removing it. Their
writable layer is still in their directory (the upper directory on the host's disk, or in the
disk image a reboot unmounted): `export_stopped` mounts the image read-only again and exports
the layer as a snapshot's is (sandboxd.runtime.nspawn.export), so that the sandbox can boot
again from its files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.errors import HostError, SandboxError
from sandboxd.host import disk
from sandboxd.runtime.nspawn.export import layer_from_upper
from sandboxd.runtime.nspawn.steps import SandboxDirs, Step, undo_all
from sandboxd.runtime.spec import read_record

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sandboxd.runtime.spec import SandboxSpec


def keep_files(steps: list[Step], spec: SandboxSpec, dirs: SandboxDirs) -> None:
    """Undo every host step of a stopped sandbox (what is left of its processes, mounts,
    network and cgroups) but leave its directory: its record and its writable layer.

    Raises:
        TeardownError: something would not go.
    """
    undo_all(steps, spec, dirs)


def export_stopped(dirs: SandboxDirs, dest: Path, exclude: Iterable[str]) -> SandboxSpec:
    """Fill the empty directory `dest` with the writable layer of the stopped sandbox in `dirs`
    (its steps undone by `keep_files`), as `layer_from_upper` does; its record. Blocking.

    Raises:
        SandboxError: it has no record.
        HostError: its disk image could not be mounted again.
        TemplateError: as `layer_from_upper`.
        TeardownError: its disk image would not unmount after.
    """
    spec = read_record(dirs.dir)
    if spec is None:
        raise SandboxError(f"the stopped sandbox in {dirs.dir.name} left no record")
    try:
        disk.reopen(dirs.disk_image, dirs.disk)
    except OSError as exc:
        raise HostError(f"sandbox {spec.id}: cannot mount its disk again: {exc}") from exc
    try:
        layer_from_upper(dirs.upper, spec.uid_base, dest, exclude)
    finally:
        disk.undo(dirs.disk_image, dirs.disk)
    return spec
