"""A sandbox's share of the kernel's per-user counters (sandboxd/host/budget.py): root in one
sandbox raises every limit it can reach, takes all it can of a counter and holds it, and host
root, a neighbour and a new sandbox still get theirs. Before budget namespaces every sandbox's count was host uid 0's:
one sandbox held 170 of the host's 176 inotify instances and host root's inotify_init failed.
The hog runs in its own session inside the sandbox and holds what it took until the sandbox
is killed."""

from __future__ import annotations

import ctypes
import errno
import os
import textwrap
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.budget import LIMITS
from sandboxd.runtime.spec import BootImage
from tests.sandboxd.inside import run
from tests.sandboxd.test_escape import as_root, new_id
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.runtime.nspawn.box import NspawnBox
    from sandboxd.runtime.nspawn.runtime import NspawnRuntime

pytestmark = [pytest.mark.root, pytest.mark.anyio]

HELD = "/run/held"  # what the hog took: "COUNT ERRNO"

# Python in the sandbox, first in each hog: every limit its root can reach raised as far as it
# goes (its own namespace's are writable once /proc/sys is; the budget namespace's are not).
RAISE_LIMITS = """
    import glob, os, resource, subprocess
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    subprocess.run(["mount", "-o", "remount,rw", "/proc/sys"], stderr=subprocess.DEVNULL)
    for path in glob.glob("/proc/sys/user/*") + glob.glob("/proc/sys/fs/inotify/*"):
        try:
            open(path, "w").write("2147483647")
        except OSError:
            pass
"""
# Python in the sandbox: take inotify instances until refused, then hold them.
INOTIFY_HOG = (
    RAISE_LIMITS
    + """
    import ctypes, signal
    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    while (fd := libc.inotify_init1(0)) >= 0:
        held.append(fd)
    error = ctypes.get_errno()
    open("{held}", "w").write(f"{{len(held)}} {{error}}")
    signal.pause()
"""
)
# Python in the sandbox: make user namespaces until refused and hold them. Each child makes a
# chain of nested ones until refused (32 levels at most; too deep is ENOSPC too), each mapping
# root to the one before (a namespace's creator must be mapped in it to make the next), and an
# fd of the innermost holds the chain: seconds, not minutes, to reach the host's default
# per-uid limit (96365 here) where nothing else caps the sandbox.
USERNS_HOG = (
    RAISE_LIMITS
    + """
    import ctypes, signal
    libc = ctypes.CDLL(None, use_errno=True)
    held, made = 0, -1
    while made:  # a child that made none was refused at once: everything is taken
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            made = 0
            while libc.unshare(0x10000000) == 0:  # then root in it, to be allowed the next
                made += 1
                for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
                    open(f"/proc/self/{{name}}", "w").write(text)
            os.write(w, f"{{made}} {{ctypes.get_errno()}}".encode())
            signal.pause()
        made, error = map(int, os.read(r, 64).split())
        if made:
            os.open(f"/proc/{{pid}}/ns/user", os.O_RDONLY)
            held += made
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
    open("{held}", "w").write(f"{{held}} {{error}}")
    signal.pause()
"""
)


def hog(box: NspawnBox, program: str) -> tuple[int, int]:
    """Start `program` as root in `box`, in a session of its own so that it outlives the
    command; (how many it took, the errno that stopped it) once it has written them."""
    source = textwrap.dedent(program.format(held=HELD))
    status, out = as_root(box, f"setsid python3 -c '{source}' </dev/null >/run/hog.log 2>&1 &")
    assert status == 0, out
    held = wait_until(
        lambda: run(box, f"cat {HELD} 2>/dev/null || true").strip() or None,
        timeout_s=120,
        what=f"the hog in {box.id} to stop taking",
    )
    count, error = held.split()
    return int(count), int(error)


def inotify_init_errno() -> int:
    """0 if host root (this process) can make an inotify instance now, else the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd < 0:
        return ctypes.get_errno()
    os.close(fd)
    return 0


async def test_one_sandbox_taking_every_inotify_instance_leaves_the_host_and_a_neighbour_theirs(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    hogging = await runtime.boot(new_id(), BootImage((base_template,)))
    neighbour = await runtime.boot(new_id(), BootImage((base_template,)))

    count, error = hog(hogging, INOTIFY_HOG)

    assert error == errno.EMFILE, (count, error)
    assert count < LIMITS["max_inotify_instances"]
    assert inotify_init_errno() == 0
    status, out = as_root(
        neighbour,
        "python3 -c 'import ctypes; print(ctypes.CDLL(None, use_errno=True).inotify_init1(0))'",
    )
    assert status == 0, out
    assert int(out) >= 0, out


async def test_one_sandbox_making_every_user_namespace_it_can_leaves_room_to_boot_another(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    hogging = await runtime.boot(new_id(), BootImage((base_template,)))

    count, error = hog(hogging, USERNS_HOG)

    assert error == errno.ENOSPC, (count, error)
    another = await runtime.boot(new_id(), BootImage((base_template,)))
    assert run(another, "echo booted").strip() == "booted"
    assert count < LIMITS["max_user_namespaces"]
