"""A sandbox's writable layer and its size limit: a sparse ext4 image of `disk_mb` in the
sandbox's directory, loop-mounted, holding the overlay's upper and work directories. A write
past the limit ends in ENOSPC inside the sandbox, the host's disk gives no more than the image
grew to, and statfs of the sandbox's / (overlayfs answers with its upper layer's) reports the
sandbox's own disk. Each size's empty image is made once (mkfs.ext4) and copied sparsely per
sandbox, then attached to a loop device and mounted without a process (docs/sandboxd.md, "The
disk limit", has the costs).

With no limit (0) the upper and work directories sit on the host's filesystem.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
from typing import TYPE_CHECKING

from sandboxd.errors import HostError
from sandboxd.host import libc, loop
from sandboxd.host.removal import unmount

if TYPE_CHECKING:
    from pathlib import Path

# No journal: a sandbox's disk never outlives its host's boot, so there is nothing to replay,
# and every write would otherwise be written twice. Inode tables are left uninitialised
# (lazy_itable_init) and never zeroed behind the sandbox's back (noinit_itable): that zeroing
# would turn the sparse image into a 160 MiB file per 10 GiB.
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
        "-E", "lazy_itable_init=1,nodiscard")  # fmt: skip
MOUNT_OPTIONS = "noinit_itable"
# The smallest disk a template may ask for: a booted base sandbox writes a few MiB.
MIN_DISK_MB = 64


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, check=False)  # our argv
    if done.returncode != 0:
        raise OSError(errno.EIO, f"{what} failed: {done.stderr.decode(errors='replace').strip()}")


def _pristine(cache: Path, disk_mb: int) -> Path:
    """An empty filesystem image of `disk_mb`, made once per size and copied per sandbox (a
    sparse copy of about 1 MiB instead of an mkfs process per boot)."""
    image = cache / f"ext4-{disk_mb}.img"
    if image.exists():
        return image
    if shutil.which(MKFS[0]) is None:
        raise HostError(f"{MKFS[0]} is missing (scripts/install installs it)")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{image.name}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            f.truncate(disk_mb << 20)
        _run([*MKFS, str(tmp)], "mkfs.ext4")
        tmp.rename(image)  # atomic: a boot beside this one sees the whole image or none
    finally:
        tmp.unlink(missing_ok=True)
    return image


def _sparse_copy(source: Path, dest: Path) -> None:
    """Copy `source` to a new `dest`, its holes left holes (SEEK_DATA/SEEK_HOLE)."""
    with open(source, "rb") as src, open(dest, "xb") as dst:
        size = os.fstat(src.fileno()).st_size
        dst.truncate(size)
        offset = 0
        while offset < size:
            try:
                data = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole left
                    return
                raise
            hole = os.lseek(src.fileno(), data, os.SEEK_HOLE)
            while data < hole:
                data += os.copy_file_range(src.fileno(), dst.fileno(), hole - data, data, data)
            offset = hole


def make(image: Path, mount_point: Path, disk_mb: int, owner: int, cache: Path) -> None:
    """Make the image (a copy of the size's pristine one in `cache`) and mount it at
    `mount_point` (or, for 0, make a plain directory there), with `upper` and `work` in it
    owned by `owner` (uid and gid).

    Raises:
        HostError: mkfs.ext4 is missing.
        OSError: a step failed (the caller undoes what was made).
    """
    mount_point.mkdir(mode=0o700, exist_ok=True)
    if disk_mb > 0:
        _sparse_copy(_pristine(cache, disk_mb), image)
        device, fd = loop.attach(image)
        try:
            libc.mount(device, str(mount_point), "ext4", MOUNT_OPTIONS)
        finally:
            os.close(fd)  # autoclear: the device goes with the unmount (or now, if unmounted)
    for name in ("upper", "work"):
        d = mount_point / name
        d.mkdir(exist_ok=True)
        os.chown(d, owner, owner)
        d.chmod(0o755)  # the upper directory is the sandbox's `/`; serve's umask is 077


def reopen(image: Path, mount_point: Path) -> None:
    """Mount an existing disk image read-only at `mount_point` again (its loop device and mount
    went with a reboot), for its files to be read; nothing for a disk without a limit (no
    image). `undo` unmounts it.

    Raises:
        OSError: the image could not be attached or mounted.
    """
    if not image.exists():
        return
    device, fd = loop.attach(image)
    try:
        libc.mount(device, str(mount_point), "ext4", MOUNT_OPTIONS, libc.MS_RDONLY)
    finally:
        os.close(fd)


def undo(image: Path, mount_point: Path) -> None:
    """Unmount the disk and free its loop device; nothing to do for what was not made.

    Raises:
        TeardownError: the disk is busy (something still has files open on it).
    """
    unmount(mount_point)
    # Autoclear freed the device with the unmount; one still attached (sandboxd killed between
    # the attach and the mount) is detached here.
    for device in loop.backed_by(image):
        loop.detach(device)
