"""A user namespace with a sandbox's uid/gid maps, made only to be referred to: idmapped mounts
take a user namespace's fd and show files through its maps. A process that exists just long
enough to be given the maps (`unshare` between fork and exec, maps written by host root, which
needs no /etc/subuid) provides it; the namespace outlives it while an fd or a mount holds it.
One is kept per range for the life of the process: ranges are reused lowest first, so most
boots find theirs made (a process spawn less: 3-15 ms, the latter on a loaded machine)."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import TYPE_CHECKING

from sandboxd.host import libc
from sandboxd.host.uid_ranges import RANGE_SIZE

if TYPE_CHECKING:
    from collections.abc import Callable

_made: dict[int, int] = {}
_lock = threading.Lock()


def mapped_namespace(uid_base: int) -> int:
    """An fd of a user namespace mapping ids 0..65535 to `uid_base`.. (uids and gids); kept
    open by this module (do not close it).

    Raises:
        OSError: the namespace could not be made or mapped.
    """
    with _lock:
        if uid_base not in _made:
            _made[uid_base] = new_namespace(uid_base)
        return _made[uid_base]


def _unshare_user() -> None:
    libc.unshare(libc.CLONE_NEWUSER)


def new_namespace(uid_base: int, in_child: Callable[[], None] = _unshare_user) -> int:
    """A new user namespace mapping ids 0..65535 to `uid_base`.. (uids and gids), as an fd the
    caller owns. Made by a process that runs `in_child` between fork and exec (system calls
    only: it must end in the new namespace; by default it only unshares it) and is gone once
    host root has written the maps.

    Raises:
        OSError: the namespace could not be mapped or opened.
        subprocess.SubprocessError: `in_child` failed.
    """
    holder = subprocess.Popen(  # a fixed argv
        ["sleep", "infinity"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=in_child,  # noqa: PLW1509  # system calls (and /proc writes) only
        close_fds=True,
    )
    try:
        proc = f"/proc/{holder.pid}"
        mapping = f"0 {uid_base} {RANGE_SIZE}"
        with open(f"{proc}/uid_map", "w") as f:
            f.write(mapping)
        with open(f"{proc}/gid_map", "w") as f:
            f.write(mapping)
        return os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
