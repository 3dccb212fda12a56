"""Host-wide exclusive claims of what two sandboxds on one host must not share (a node agent's
cgroup parent; the nftables table of a network namespace): an flock on a file under LOCKS_DIR,
held for the life of the process (the kernel lets go of it when the process ends, however)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sandboxd.errors import HostError

LOCKS_DIR = Path("/run/sandboxd/locks")


def hold(name: str, what: str) -> int:
    """The descriptor holding the lock `name` (keep it open as long as the claim lasts).

    Raises:
        HostError: another process holds it; the message says `what` is taken.
    """
    LOCKS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(LOCKS_DIR / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise HostError(f"{what} is taken by another sandboxd on this host") from None
    return fd
