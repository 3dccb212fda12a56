"""A sandbox's root filesystem: an overlay of its template's read-only layers (lowerdirs) with
the upper and work directories of its writable layer (sandboxd.host.disk). O(1) to create; the
sandbox's writes land only in its upper directory."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host import libc
from sandboxd.host.removal import remove_tree, unmount
from sandboxd.layers import layer_view
from sandboxd.runtime.nspawn.container import ENVD_LAUNCHER

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sandboxd.runtime.nspawn.spec import BootImage

# The overlay option string is comma-separated and lowerdir takes ':'-separated layers.
_UNSAFE = frozenset(",:\n\\ ")
VIEW_PREFIX = ".view-"  # read_only_view's directories (a crash leaves them: remove them at start)
# A mount's options are one page; each layer's path is about 100 characters of it.
MAX_OPTIONS = 4000


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


@contextlib.contextmanager
def read_only_view(lowers: Sequence[Path], under: Path) -> Iterator[Path]:
    """`lowers` (lowest first) as one read-only overlay on the host, without an idmap (the ids
    the image has): what a sandbox of them sees. Mounted in a new `.view-` directory of `under`
    over an empty layer (the kernel wants two lower layers without an upper directory), and
    unmounted and removed when the block ends.

    Raises:
        TemplateError: too many layers for one mount's options, a path that cannot be an
            overlay option, or the mount failed.
    """
    scratch = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX, dir=under))
    empty, root = scratch / "empty", scratch / "root"
    try:
        empty.mkdir()
        root.mkdir()
        layers = [empty, *lowers]
        if len(_lowerdir(layers)) > MAX_OPTIONS:
            raise TemplateError(f"{len(lowers)} layers are more than one overlay mount takes")
        _check_paths(*layers, root)
        try:
            libc.mount("overlay", str(root), "overlay", f"ro,lowerdir={_lowerdir(layers)}")
        except OSError as exc:
            raise TemplateError(f"cannot read the image's layers: {exc.strerror}") from exc
        try:
            yield root
        finally:
            unmount(root)
    finally:
        remove_tree(scratch)


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
    # Found as a layer has it (a link too: nspawn says what is wrong with it), or through the
    # stack, the image's links resolved inside it: a layer above the image's (systemd's,
    # sandboxd.builds.systemd_init) has /sbin/init under the image's /sbin link, as usr/sbin.
    needed = "/sbin/init" if image.init == "systemd" else ENVD_LAUNCHER
    if not any(os.path.lexists(layer / needed.lstrip("/")) for layer in image.layers) and (
        layer_view.resolve(image.layers, needed) is None
    ):
        where = ", ".join(str(layer) for layer in image.layers)
        raise TemplateError(f"no {needed} in the template's layers ({where})")
