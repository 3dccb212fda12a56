"""A sandbox's root filesystem: an overlay of the template's read-only root (lowerdir) with an
upper and a work directory in the sandbox's own directory. O(1) to create; the sandbox's writes
land only in its upper directory (sandbox-runtime.md §2)."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd import libc
from sandboxd.errors import TeardownError, TemplateError
from sandboxd.removal import is_mountpoint

if TYPE_CHECKING:
    from pathlib import Path

# The overlay option string is comma-separated and lowerdir takes ':'-separated layers.
_UNSAFE = frozenset(",:\n\\ ")


@dataclass(frozen=True)
class Overlay:
    """The overlay root of one sandbox, all of it inside `sandbox_dir`."""

    sandbox_dir: Path

    @property
    def upper(self) -> Path:
        return self.sandbox_dir / "upper"

    @property
    def work(self) -> Path:
        return self.sandbox_dir / "work"

    @property
    def root(self) -> Path:
        """The mount point: the container's `/`."""
        return self.sandbox_dir / "root"

    def mount(self, lower: Path) -> None:
        """Mount `lower` + upper at `root`.

        Raises:
            TemplateError: `lower` is not a directory with an /sbin/init, or its path cannot be
                an overlay option.
            OSError: the mount failed.
        """
        for path in (lower, self.sandbox_dir):
            if _UNSAFE & set(str(path)):
                raise TemplateError(f"{path}: overlay paths may not contain , : \\ or spaces")
        require_rootfs(lower)
        for d in (self.upper, self.work, self.root):
            d.mkdir(mode=0o755, exist_ok=True)
        options = f"lowerdir={lower},upperdir={self.upper},workdir={self.work}"
        libc.mount("overlay", str(self.root), "overlay", options)

    def mounted(self) -> bool:
        return is_mountpoint(self.root)

    def unmount(self) -> None:
        """Unmount the root if it is mounted.

        Raises:
            TeardownError: the mount is busy (a process still uses it).
        """
        try:
            libc.umount(str(self.root))
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return  # not mounted (any more)
            raise TeardownError(f"cannot unmount {self.root}: {exc.strerror}") from exc


def require_rootfs(path: Path) -> None:
    """Raises TemplateError unless `path` looks like a bootable root filesystem."""
    init = path / "sbin/init"
    if not (init.exists() or init.is_symlink()):
        raise TemplateError(f"no template root filesystem at {path} (no /sbin/init)")
