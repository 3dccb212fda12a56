"""Host-wide kernel limits sandboxes share, raised as they are needed (never lowered).

`fs.inotify.max_user_instances` (default 128) counts per uid in each user namespace and, up the
chain of namespaces, against each namespace's creator in its parent (kernel/ucount.c): every
sandbox's namespace is made by nspawn as host root, so all sandboxes count against host uid 0's
limit as before user namespaces. A booted sandbox holds 5 instances at idle (8 without the
slimmed boot) and envd's file watchers take more, so sandboxd keeps the limit at least 128 (the
host's own use) + 16 per sandbox. (docs/sandboxd.md, "How a sandbox runs")
"""

from __future__ import annotations

from pathlib import Path

INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_HOST_SHARE = 128
INOTIFY_PER_SANDBOX = 16


def inotify_instances_for(sandboxes: int) -> int:
    return INOTIFY_HOST_SHARE + INOTIFY_PER_SANDBOX * sandboxes


def ensure_inotify_instances(sandboxes: int) -> None:
    """Raise the limit to what `sandboxes` running sandboxes need, if it is lower."""
    wanted = inotify_instances_for(sandboxes)
    if int(INOTIFY_INSTANCES.read_text()) < wanted:
        INOTIFY_INSTANCES.write_text(str(wanted))
