"""A user namespace with a sandbox's uid/gid maps, made only to be referred to: idmapped mounts
take a user namespace's fd and show files through its maps. A process that exists just long
enough to be given the maps (`unshare` between fork and exec, maps written by host root, which
needs no /etc/subuid) provides it; the namespace outlives it while an fd or a mount holds it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import TYPE_CHECKING

from sandboxd import libc
from sandboxd.uid_ranges import RANGE_SIZE

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def mapped_namespace(uid_base: int) -> Iterator[int]:
    """An fd of a new user namespace mapping ids 0..65535 to `uid_base`.. (uids and gids).

    Raises:
        OSError: the namespace could not be made or mapped.
    """
    holder = subprocess.Popen(  # a fixed argv
        ["sleep", "infinity"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: libc.unshare(libc.CLONE_NEWUSER),  # noqa: PLW1509  # syscalls only
        close_fds=True,
    )
    try:
        proc = f"/proc/{holder.pid}"
        mapping = f"0 {uid_base} {RANGE_SIZE}"
        with open(f"{proc}/uid_map", "w") as f:
            f.write(mapping)
        with open(f"{proc}/gid_map", "w") as f:
            f.write(mapping)
        fd = os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
    try:
        yield fd
    finally:
        os.close(fd)
