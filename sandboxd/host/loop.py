"""Loop devices through their ioctls (linux/loop.h): attach a file with autoclear, so that the
device frees itself when its filesystem is unmounted, and find and detach the devices backed by
a file. A boot attaches one per sandbox; util-linux's `mount -o loop` and `losetup` do the same
at the cost of a process each (10-20 ms on a loaded machine)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from pathlib import Path

LOOP_CONTROL = "/dev/loop-control"
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LOOP_CLR_FD = 0x4C01
LO_FLAGS_AUTOCLEAR = 4
# struct loop_config: fd, block_size, struct loop_info64 (232 bytes), 8 reserved u64.
_INFO64 = "QQQQQIIII64s64s32sQQ"
_CONFIG = "II" + _INFO64 + "8Q"
SYS_BLOCK = Path("/sys/block")


def attach(image: Path) -> tuple[str, int]:
    """Attach `image` read-write to a free loop device; returns (device path, its open fd).
    Autoclear is set: once the fd is closed and nothing mounts the device, it is freed, so
    close the fd only after mounting it.

    Raises:
        OSError: no loop device could be had.
    """
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        name = str(image).encode()[:63]
        config = struct.pack(
            _CONFIG, backing, 0,
            0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0,
            *([0] * 8),
        )  # fmt: skip
        control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(64):  # another process may take the free device first: EBUSY
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
                device = f"/dev/loop{number}"
                fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
                try:
                    fcntl.ioctl(fd, LOOP_CONFIGURE, config)
                except OSError as exc:
                    os.close(fd)
                    if exc.errno == errno.EBUSY:
                        continue
                    raise
                return device, fd
        finally:
            os.close(control)
    finally:
        os.close(backing)
    raise OSError(errno.EBUSY, "no free loop device after 64 tries")


def backed_by(image: Path) -> list[str]:
    """The loop devices whose backing file is `image` (sysfs names it)."""
    found = []
    target = str(image)
    for entry in SYS_BLOCK.glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            name = entry.read_text().strip()
            if name in (target, f"{target} (deleted)"):
                found.append(f"/dev/{entry.parent.parent.name}")
    return found


def detach(device: str) -> None:
    """Detach `device` (nothing to do when it is already free)."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(OSError):  # ENXIO: free already
            fcntl.ioctl(fd, LOOP_CLR_FD)
    finally:
        os.close(fd)
