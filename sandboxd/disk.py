"""A sandbox's writable layer and its size limit: a sparse ext4 image of `disk_mb` in the
sandbox's directory, loop-mounted, holding the overlay's upper and work directories. A write
past the limit ends in ENOSPC inside the sandbox, the host's disk gives no more than the image
grew to, and statfs of the sandbox's / (overlayfs answers with its upper layer's) reports the
sandbox's own disk. Measured on these machines: mkfs 16 ms and mount 20 ms for 10 GiB, 4.3 MiB
on the host (docs/sandboxd.md, "The disk limit").

With no limit (0) the upper and work directories sit on the host's filesystem.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

from sandboxd import libc
from sandboxd.errors import HostError, TeardownError
from sandboxd.removal import is_mountpoint

if TYPE_CHECKING:
    from pathlib import Path

# No journal: a sandbox's disk never outlives its host's boot, so there is nothing to replay,
# and every write would otherwise be written twice. Inode tables are left uninitialised
# (lazy_itable_init) and never zeroed behind the sandbox's back (noinit_itable): that zeroing
# would turn the sparse image into a 160 MiB file per 10 GiB.
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
        "-E", "lazy_itable_init=1,nodiscard")  # fmt: skip
MOUNT_OPTIONS = "loop,noinit_itable"
# The smallest disk a template may ask for: a booted base sandbox writes a few MiB.
MIN_DISK_MB = 64


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, check=False)  # our argv
    if done.returncode != 0:
        raise OSError(errno.EIO, f"{what} failed: {done.stderr.decode(errors='replace').strip()}")


def make(image: Path, mount_point: Path, disk_mb: int, owner: int) -> None:
    """Make the image and mount it at `mount_point` (or, for 0, a plain directory), with
    `upper` and `work` in it owned by `owner` (uid and gid).

    Raises:
        HostError: mkfs.ext4 or mount is missing.
        OSError: a step failed (the caller undoes what was made).
    """
    mount_point.mkdir(mode=0o700, exist_ok=True)
    if disk_mb > 0:
        for tool in ("mkfs.ext4", "mount", "losetup"):
            if shutil.which(tool) is None:
                raise HostError(f"{tool} is missing (scripts/install installs it)")
        with open(image, "xb") as f:
            f.truncate(disk_mb << 20)
        _run([*MKFS, str(image)], "mkfs.ext4")
        _run(["mount", "-o", MOUNT_OPTIONS, str(image), str(mount_point)], "mounting the disk")
    for name in ("upper", "work"):
        d = mount_point / name
        d.mkdir(mode=0o755, exist_ok=True)
        os.chown(d, owner, owner)


def undo(image: Path, mount_point: Path) -> None:
    """Unmount the disk and free its loop device; nothing to do for what was not made.

    Raises:
        TeardownError: the disk is busy (something still has files open on it).
    """
    if is_mountpoint(mount_point):
        try:
            libc.umount(str(mount_point))
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOENT):
                raise TeardownError(f"cannot unmount {mount_point}: {exc.strerror}") from exc
    # mount -o loop sets autoclear, so the unmount freed the device; one left attached (a
    # sandboxd killed between losetup and mount) is detached here.
    if image.exists():
        found = subprocess.run(
            ["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        for device in found.stdout.split():
            subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
