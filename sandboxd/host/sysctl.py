"""Host-wide kernel limits that sandboxes must not reach, raised when a Runtime starts (never
lowered). (docs/sandboxd.md, "What one sandbox may hold")

- The per-uid limits of the initial user namespace: each sandbox is charged to a host uid of
  its own there (sandboxd.host.budget), so these are kept at least its budget, which then is
  what binds. They are written as fs.inotify.* and fs.fanotify.*, the same numbers as
  /proc/sys/user's, which need CAP_SYS_RESOURCE (some hosts' root lacks it); the namespace
  counts exist only there, and their defaults (half of kernel.threads-max) are far above.
- fs.file-max counts every open file on the host, and only host root may go past it: one sandbox
  reaching it (~220 bytes of kernel memory a file: 1 GiB holds ~4.9 million) stops every other.
  Open files are charged to the memory cgroup of whoever opens them (kernel 4.15, "account filp
  cache to kmemcg"), so the sandbox's memory limit bounds them; the count goes to its maximum,
  as systemd's PID 1 does on hosts it boots.
- kernel.pid_max: each sandbox may have PIDS_LIMIT (4096) processes and threads; at the old
  default 32768, eight would take every pid. It goes to the largest the kernel allows (2^22 on
  64-bit), as systemd's 50-pid-max.conf sets.
"""

from __future__ import annotations

from pathlib import Path

from sandboxd.errors import HostError
from sandboxd.host.budget import LIMITS

SYSCTLS = Path("/proc/sys")
FILE_MAX = (1 << 63) - 1  # LONG_MAX
PID_MAX = 1 << 22  # PID_MAX_LIMIT on 64-bit


# /proc/sys/user's names of the same numbers under fs/.
ALIASES = {
    "max_inotify_instances": "fs/inotify/max_user_instances",
    "max_inotify_watches": "fs/inotify/max_user_watches",
    "max_fanotify_groups": "fs/fanotify/max_user_groups",
    "max_fanotify_marks": "fs/fanotify/max_user_marks",
}


def wanted() -> dict[Path, int]:
    """Each host-wide limit sandboxd needs and its least value."""
    limits = {SYSCTLS / ALIASES.get(name, f"user/{name}"): value for name, value in LIMITS.items()}
    limits[SYSCTLS / "fs/file-max"] = FILE_MAX
    limits[SYSCTLS / "kernel/pid_max"] = PID_MAX
    return limits


def ensure_host_limits() -> None:
    """Raise each of `wanted()` that is lower (one the kernel lacks is skipped).

    Raises:
        HostError: one could not be raised (e.g. user namespaces limited below a sandbox's
            budget where sandboxd lacks CAP_SYS_RESOURCE).
    """
    for path, value in wanted().items():
        try:
            if path.exists() and int(path.read_text()) < value:
                path.write_text(str(value))
        except OSError as exc:
            raise HostError(f"cannot raise {path} to {value}: {exc}") from exc
