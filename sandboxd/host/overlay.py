"""A sandbox's root filesystem: an overlay of its template's read-only layers (lowerdirs) with
the upper and work directories of its writable layer (sandboxd.host.disk). O(1) to create; the
sandbox's writes land only in its upper directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host import libc

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

# The overlay option string is comma-separated and lowerdir takes ':'-separated layers.
_UNSAFE = frozenset(",:\n\\ ")


def mount(lowers: Sequence[Path], upper: Path, work: Path, root: Path) -> None:
    """Mount `lowers` (lowest first) + `upper` at `root`.

    Raises:
        TemplateError: a path cannot be an overlay option.
        OSError: the mount failed.
    """
    for path in (*lowers, upper, work, root):
        if _UNSAFE & set(str(path)):
            raise TemplateError(f"{path}: overlay paths may not contain , : \\ or spaces")
    root.mkdir(mode=0o755, exist_ok=True)
    lowerdir = ":".join(str(p) for p in reversed(lowers))  # overlayfs lists the top one first
    libc.mount(
        "overlay", str(root), "overlay", f"lowerdir={lowerdir},upperdir={upper},workdir={work}"
    )


def require_rootfs(path: Path) -> None:
    """Raises TemplateError unless `path` looks like a bootable root filesystem."""
    init = path / "sbin/init"
    if not (init.exists() or init.is_symlink()):
        raise TemplateError(f"no template root filesystem at {path} (no /sbin/init)")
