"""Each sandbox's own budget of the kernel's per-user counters: inotify instances and watches,
fanotify groups and marks, and user namespaces.

The kernel charges these per (user namespace, uid) at every level up the chain of user
namespaces: a level's charge goes to the namespace's creator in its parent, capped by the
parent's limit (kernel/ucount.c, inc_ucount). nspawn, as host root, makes each sandbox's user
namespace; left at that, every sandbox's inotify instances and nested user namespaces counted
against host uid 0 in the initial namespace, which host root and every other sandbox share: one
sandbox could take them all.

So nspawn runs in a user namespace of the sandbox's own, its budget namespace, made by the first
uid of the sandbox's range and given LIMITS by host root; nspawn makes the sandbox's namespace
inside it. Up the chain:

- the sandbox's namespace: its limits are its root's to change (/proc/sys/user is writable by a
  namespace's root), and they count per uid in it, so they bound nothing;
- the budget namespace: everything the sandbox holds, whichever of its uids holds it, is charged
  to nspawn's uid there, capped by LIMITS, which the sandbox's root cannot change (it has no
  capability in a parent namespace);
- the initial namespace: charged to the range's first host uid, apart from host uid 0 and from
  every other sandbox; sandboxd.host.sysctl keeps these per-uid limits at least LIMITS.

The budget namespace maps its ids 0..65535 to the range, so nspawn, root in it, makes the
sandbox's namespace with --private-users=0:65536 and the sandbox's ids are the range's on the
host as before. (nspawn 252 needs mknod for the container's /dev when it is given a uid shift
other than 0, and mknod of a device needs host root; with shift 0 it binds the host's device
nodes instead.) nspawn is then the range's first uid on the host, to which the host's files are
closed: it gets a private mount namespace, with a tmpfs of its own over /run/systemd/nspawn
(where it keeps its state) and the sandbox's root bound in there. (docs/sandboxd.md, "What one
sandbox may hold")
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sandboxd.host import libc, userns

USER_SYSCTLS = Path("/proc/sys/user")
NSPAWN_STATE = Path("/run/systemd/nspawn")
LAUNCH_ROOT = NSPAWN_STATE / "root"  # where nspawn finds the sandbox's root
# What one sandbox may hold, whichever of its uids holds it (docs/sandboxd.md says why each).
NAMESPACES_EACH = 512
LIMITS = {
    "max_inotify_instances": 256,
    "max_inotify_watches": 65536,
    "max_fanotify_groups": 128,
    "max_fanotify_marks": 65536,
    **{
        f"max_{kind}_namespaces": NAMESPACES_EACH
        for kind in ("user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time")
    },
}

_made: dict[int, int] = {}
_lock = threading.Lock()


def budget_namespace(uid_base: int) -> int:
    """The budget namespace of range `uid_base`, as an fd kept open by this module (do not
    close it). One is kept per range for the life of the process, as sandboxd.host.userns
    keeps its namespaces: ranges are reused lowest first, so most boots find theirs made (a
    process spawn less: 3-50 ms here). A range's earlier sandbox is gone before it is reused,
    and what it held with it.

    Raises:
        OSError: the namespace could not be mapped or opened.
        subprocess.SubprocessError: it could not be made or limited.
    """
    with _lock:
        if uid_base not in _made:
            _made[uid_base] = _new_namespace(uid_base)
        return _made[uid_base]


def _new_namespace(uid_base: int) -> int:
    def create() -> None:
        """Between fork and exec: as the range's first uid, so that it owns the namespace,
        into a new user namespace, whose limits its creator may set."""
        os.setgroups([])
        os.setresgid(uid_base, uid_base, uid_base)
        os.setresuid(uid_base, uid_base, uid_base)
        libc.unshare(libc.CLONE_NEWUSER)
        for name, value in LIMITS.items():
            path = USER_SYSCTLS / name
            if path.exists():
                path.write_text(str(value))

    return userns.new_namespace(uid_base, create)


def enter(budget: int, root: Path) -> None:
    """Move the calling process into the budget namespace `budget` as its root, in a mount
    namespace of its own where `root` is at LAUNCH_ROOT: between fork and exec of nspawn (a
    single thread is needed to change user namespace). NSPAWN_STATE must exist."""
    libc.setns(budget, libc.CLONE_NEWUSER)
    libc.unshare(libc.CLONE_NEWNS)
    libc.mount("none", "/", "", "", libc.MS_REC | libc.MS_SLAVE)  # nothing leaks to the host
    # Opened while still host uid 0, which may pass root-only directories on the way.
    tree = os.open(root, os.O_PATH | os.O_DIRECTORY)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    libc.mount("tmpfs", str(NSPAWN_STATE), "tmpfs", "mode=0755")
    LAUNCH_ROOT.mkdir()
    libc.mount(f"/proc/self/fd/{tree}", str(LAUNCH_ROOT), "", "", libc.MS_BIND | libc.MS_REC)
    os.close(tree)
