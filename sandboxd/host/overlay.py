"""A sandbox's root filesystem: an overlay of its template's read-only layers (lowerdirs) with
the upper and work directories of its writable layer (sandboxd.host.disk). O(1) to create; the
sandbox's writes land only in its upper directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host import libc
from sandboxd.host.nspawn import ENVD_LAUNCHER

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sandboxd.host.spec import BootImage

# The overlay option string is comma-separated and lowerdir takes ':'-separated layers.
_UNSAFE = frozenset(",:\n\\ ")


def mount(lowers: Sequence[Path], upper: Path, work: Path, root: Path) -> None:
    """Mount `lowers` (lowest first) + `upper` at `root`.

    Raises:
        TemplateError: a path cannot be an overlay option.
        OSError: the mount failed.
    """
    _check_paths(*lowers, upper, work, root)
    root.mkdir(mode=0o755, exist_ok=True)
    libc.mount(
        "overlay",
        str(root),
        "overlay",
        f"lowerdir={_lowerdir(lowers)},upperdir={upper},workdir={work}",
    )


def mount_read_only(lowers: Sequence[Path], root: Path) -> None:
    """Mount `lowers` (lowest first, at least two: the kernel's minimum without an upper
    directory) at the existing directory `root`, read-only: what a sandbox of them sees.

    Raises:
        TemplateError: a path cannot be an overlay option.
        OSError: the mount failed.
    """
    _check_paths(*lowers, root)
    libc.mount("overlay", str(root), "overlay", f"lowerdir={_lowerdir(lowers)}")


def _check_paths(*paths: Path) -> None:
    for path in paths:
        if _UNSAFE & set(str(path)):
            raise TemplateError(f"{path}: overlay paths may not contain , : \\ or spaces")


def _lowerdir(lowers: Sequence[Path]) -> str:
    return ":".join(str(p) for p in reversed(lowers))  # overlayfs lists the top one first


def require_rootfs(image: BootImage) -> None:
    """Raises TemplateError unless `image`'s layers are directories and one of them has what
    its init starts: /sbin/init (systemd), or the envd layer's launcher (envd)."""
    if not image.layers:
        raise TemplateError("an image of no layers")
    for layer in image.layers:
        if not layer.is_dir():
            raise TemplateError(f"no template root filesystem at {layer}")
    needed = "sbin/init" if image.init == "systemd" else ENVD_LAUNCHER.lstrip("/")
    if not any(
        (layer / needed).exists() or (layer / needed).is_symlink() for layer in image.layers
    ):
        where = ", ".join(str(layer) for layer in image.layers)
        raise TemplateError(f"no /{needed} in the template's layers ({where})")
