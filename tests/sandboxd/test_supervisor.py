"""Finding nspawn among a sandbox's processes. The cgroup tree is read a directory at a time while
nspawn moves itself into a subgroup it has just made, so a read can list nspawn's outer child
without nspawn; that child must not be taken for nspawn (a boot once waited 30 s on it)."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.cgroups import CgroupHost, Limits, SandboxCgroups
from sandboxd.runtime.nspawn import container

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root

# A process named as nspawn with a child of the same name (inherited) that it places in the
# sandbox's cgroups, as nspawn does with its outer child; prints the child's pid once it is there.
NSPAWN_AND_CHILD = """
import os, sys, time
with open("/proc/self/comm", "w") as f:
    f.write("systemd-nspawn")
r, w = os.pipe()
child = os.fork()
if child == 0:
    for d in sys.argv[1:]:
        with open(os.path.join(d, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    os.write(w, b".")
    time.sleep(120)
    os._exit(0)
os.read(r, 1)
print(child, flush=True)
time.sleep(120)
"""


@pytest.fixture
def cgroups(cgroup_parent: str) -> Iterator[SandboxCgroups]:
    made = SandboxCgroups(CgroupHost.detect(), cgroup_parent, f"sv{uuid.uuid4().hex[:10]}")
    made.create(Limits())
    try:
        yield made
    finally:
        made.kill()
        made.wait_empty(timeout_s=10)
        made.remove()


def test_nspawns_child_seen_without_nspawn_is_not_taken_for_it(cgroups: SandboxCgroups) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", NSPAWN_AND_CHILD, *map(str, cgroups.dirs)],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert cgroups.pids() == {child}  # what a read that missed nspawn lists
        assert Path(f"/proc/{child}/comm").read_text() == "systemd-nspawn\n"
        assert container.supervisor(cgroups) is None

        for d in cgroups.dirs:  # nspawn found as well: it is the one
            (d / "cgroup.procs").write_text(str(parent.pid))
        assert cgroups.pids() == {parent.pid, child}
        assert container.supervisor(cgroups) == parent.pid
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_pids_reads_through_cgroups_removed_while_walking(cgroups: SandboxCgroups) -> None:
    """A container's systemd makes and removes cgroups under payload all the time; a cgroup
    removed between the walk listing it and the read of its cgroup.procs answers ENODEV or
    ENOENT, and pids() must take it for empty (a leak test once failed on ENODEV)."""
    member = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            children = [cgroups.unified / f"churn{i}" for i in range(20)]
            for d in children:
                d.mkdir(exist_ok=True)
            for d in children:
                d.rmdir()

    churner = threading.Thread(target=churn)
    try:
        (cgroups.unified / "cgroup.procs").write_text(str(member.pid))
        churner.start()
        for _ in range(3000):  # the race hits within a few hundred walks on these machines
            assert member.pid in cgroups.pids()
    finally:
        stop.set()
        if churner.ident is not None:
            churner.join()
        member.kill()
        member.wait()


# Forks children that exit at once and are reaped by the kernel (SIGCHLD ignored).
FORKER = """
import os, signal
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
while True:
    if os.fork() == 0:
        os._exit(0)
"""


def test_leader_takes_a_child_reaped_while_looked_at_for_gone() -> None:
    """nspawn's outer child exits while the leader is sought. A child reaped between the lookup
    of /proc/PID/ns/* and its readlink answers EACCES, not ENOENT; leader() must take it for
    gone (a create under load once failed its boot on that EACCES)."""
    forker = subprocess.Popen([sys.executable, "-c", FORKER])
    try:
        for _ in range(20000):  # the old code raised ~13 times in 5000 looks on these machines
            assert container.leader(forker.pid) is None
    finally:
        forker.kill()
        forker.wait()
