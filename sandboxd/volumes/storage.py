"""Where a volume's files live: an ext4 filesystem of its own in a sparse image file,
`volumes/<id>.img` in the state directory, loop-mounted at `volumes/<id>/`. Its size is the
filesystem's, so a write past it ends in ENOSPC wherever it comes from (a sandbox, the content
API) and the host's disk gives no more than the image grew to. A hard link cannot leave a
filesystem, so none made inside a volume reaches a file outside it.

Files keep the ids they are given: canonical ones (0 root, OWNER the sandbox's `user`), which
each sandbox's mount maps into its own uid range. The root directory belongs to OWNER.

The mounts outlive sandboxd's stop (a running sandbox keeps its volumes, as it keeps running);
`ensure_mounted` at the next start mounts those a host reboot took away. The host's mounts are
nosuid and nodev: whatever a sandbox leaves there is inert on the host.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

from sandboxd.errors import HostError
from sandboxd.host import libc, loop

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

log = logging.getLogger("sandboxd.volumes.storage")

# The uid and gid of `user` in the base template and in every image sandboxd provisions
# (sandboxd.builds.provision.FIRST_UID): a volume's root is theirs, so `user` may write there.
OWNER = 1000
ROOT_MODE = 0o755
MIN_SIZE_MB = 16  # ext4 with a journal needs a few MiB of its own
# A journal, unlike a sandbox's disk (sandboxd.host.disk): a volume outlives the host's boot,
# and a crash must not cost its files. Nothing is zeroed up front (lazy_*_init, noinit_itable at
# mount), or the sparse image would grow by its inode tables and journal at once.
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0",
        "-E", f"lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner={OWNER}:{OWNER}")  # fmt: skip
MOUNT_OPTIONS = "noinit_itable"
MS_NOSUID = 0x2
MS_NODEV = 0x4
LOST_FOUND = "lost+found"


class VolumeStorage:
    """The volumes' images and mount points under `root` (the state directory's volumes/)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mount_path(self, volume_id: str) -> Path:
        """Where the volume's files are (mounted while sandboxd has it)."""
        return self.root / volume_id

    def image(self, volume_id: str) -> Path:
        return self.root / f"{volume_id}.img"

    def create(self, volume_id: str, size_mb: int) -> None:
        """Make the volume's filesystem of `size_mb` and mount it; on failure nothing is left.

        Raises:
            HostError: mkfs.ext4 is missing.
            OSError: a step failed.
        """
        if shutil.which(MKFS[0]) is None:
            raise HostError(f"{MKFS[0]} is missing (scripts/install installs it)")
        self.root.mkdir(mode=0o700, exist_ok=True)
        image = self.image(volume_id)
        try:
            with open(image, "xb") as f:
                f.truncate(size_mb << 20)
            done = subprocess.run([*MKFS, str(image)], capture_output=True, check=False)
            if done.returncode != 0:
                stderr = done.stderr.decode(errors="replace").strip()
                raise OSError(errno.EIO, f"mkfs.ext4 failed: {stderr}")
            self._mount(volume_id)
            # E2B's volumes start empty; fsck makes the directory again should it need one.
            os.rmdir(self.mount_path(volume_id) / LOST_FOUND)
        except BaseException:
            with contextlib.suppress(Exception):
                self.delete(volume_id)
            raise

    def delete(self, volume_id: str) -> None:
        """Unmount the volume, free its loop device, remove its image and mount point: nothing of
        it is left (nothing to do for what is absent). The unmount is lazy: a content-API
        transfer still under way keeps the filesystem (and its loop device, and the image's
        blocks) until it ends; nothing new reaches it.
        """
        mount_point = self.mount_path(volume_id)
        image = self.image(volume_id)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            while os.path.ismount(mount_point):
                libc.umount(str(mount_point), libc.MNT_DETACH)
        for device in loop.backed_by(image):  # autoclear frees it at the unmount; else here
            loop.detach(device)
        with contextlib.suppress(FileNotFoundError):
            mount_point.rmdir()
        image.unlink(missing_ok=True)

    def ensure_mounted(self, volume_ids: Iterable[str]) -> None:
        """Mount each of the volumes not mounted (after a host reboot), and remove the images
        and mount points of volumes not among them (a create cut short by a stop). A volume
        whose image will not mount is logged and left unmounted: the content API answers 404
        for it, and the others are served."""
        wanted = set(volume_ids)
        if self.root.is_dir():
            for entry in self.root.iterdir():
                volume_id = entry.name.removesuffix(".img")
                if volume_id not in wanted:
                    log.warning("removing %s: no volume of that id", entry)
                    self.delete(volume_id)
        for volume_id in sorted(wanted):
            if not os.path.ismount(self.mount_path(volume_id)):
                try:
                    self._mount(volume_id)
                except OSError as exc:
                    log.error("volume %s cannot be mounted: %s", volume_id, exc)

    def mounted(self, volume_id: str) -> bool:
        return os.path.ismount(self.mount_path(volume_id))

    def _mount(self, volume_id: str) -> None:
        mount_point = self.mount_path(volume_id)
        mount_point.mkdir(mode=0o700, exist_ok=True)
        device, fd = loop.attach(self.image(volume_id))
        try:
            libc.mount(device, str(mount_point), "ext4", MOUNT_OPTIONS, MS_NOSUID | MS_NODEV)
        finally:
            os.close(fd)  # autoclear: the device goes with the unmount (or now, if unmounted)
