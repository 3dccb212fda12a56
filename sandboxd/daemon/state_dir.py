"""The state directory closed to other host users: it holds the store (a create's `envVars`,
`egressProxy` credentials and registry accounts are in its rows, and in the WAL before they are
checkpointed), the tokens' secret and the build contexts. Everything sandboxd writes there is
made under umask 077, and what an older sandboxd (or a caller's umask) left open is closed at
start.

Nothing in a sandbox reaches the host's paths into the directory: its layers are bound through
idmapped mounts and its root is an overlay, both made by root, so a 0700 directory changes
nothing for the sandboxes' uid ranges. What sandboxd makes for sandboxes to read (layers, their
writable directories, unit drop-ins, cgroups) sets its modes itself, and the programs that make
such trees (debootstrap, nspawn's container) run under umask 022
(sandboxd.runtime.nspawn.container.SANDBOX_UMASK)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from sandboxd.store.sqlite.database import DB_FILE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PRIVATE_UMASK = 0o077
SECRET_FILE = "secret"  # noqa: S105  # the file's name, not a secret
# Files whose contents are secrets, and directories whose contents are only sandboxd's.
_PRIVATE_FILES = (DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", SECRET_FILE)
_PRIVATE_DIRS = ("uploads", "layers")


def open_private(state_dir: Path) -> None:
    """Set the process's umask to 077 and make `state_dir` (made if missing) 0700, its secret
    files 0600 and its private directories 0700, whatever an earlier start left."""
    os.umask(PRIVATE_UMASK)
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_dir.chmod(0o700)
    for names, mode in ((_PRIVATE_FILES, 0o600), (_PRIVATE_DIRS, 0o700)):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(state_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The process's umask set to `mask` for the block (single-threaded callers only: the
    umask is the process's, not a thread's)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
