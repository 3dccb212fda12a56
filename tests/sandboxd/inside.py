"""Looking into and around sandboxes from the host: commands inside (nsenter), and everything a
sandbox leaves on the host (mounts, cgroups, processes, namespaces, files)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.host import uid_ranges
from sandboxd.host.removal import mounts_under
from sandboxd.runtime.spec import RECORD

if TYPE_CHECKING:
    from sandboxd.runtime.nspawn.box import NspawnBox
    from sandboxd.runtime.nspawn.runtime import NspawnRuntime


def run(box: NspawnBox, script: str) -> str:
    """`sh -c script` in all of the sandbox's namespaces; its stdout (it must exit 0)."""
    done = subprocess.run(
        ["nsenter", "-t", str(box.leader_pid), "-a", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, f"{script!r} in {box.id} failed: {done.stderr}"
    return done.stdout


def processes_seen_from(box: NspawnBox) -> dict[int, str]:
    """pid → command name of every process the sandbox can see."""
    listing = run(box, 'for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm)"; done')
    seen = {}
    for line in listing.splitlines():
        pid, _, comm = line.partition(" ")
        if comm:  # a process that ended while listing has no comm left
            seen[int(pid)] = comm
    return seen


def _this_process_tree() -> set[str]:
    """This test process and every process descended from it (sandboxd servers, nspawn)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as f:
            parents[pid] = f.read().rsplit(")", 1)[1].split()[1]
    tree = {str(os.getpid())}
    grew = True
    while grew:
        grown = tree | {pid for pid, parent in parents.items() if parent in tree}
        grew, tree = grown != tree, grown
    return tree


def net_namespaces_held(extra_pids: set[int]) -> set[int]:
    """Inodes of the network namespaces that this test's own process tree, or one of
    `extra_pids`, is in or holds an fd of.

    Only our own processes count: the kernel reuses a freed namespace's inode number, so on a
    machine where others make namespaces too, a host-wide look would see strangers. And only
    network namespaces: every kind of namespace takes its number from one pool, so a user
    namespace sandboxd keeps (sandboxd/host/userns.py) may carry a dead network namespace's."""
    inodes = set()
    for pid in _this_process_tree() | {str(p) for p in extra_pids}:
        paths = [f"/proc/{pid}/ns/net"]
        with contextlib.suppress(OSError):
            paths += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
        for path in paths:
            try:
                target = os.readlink(path)
            except OSError:
                continue
            if target.startswith("net:["):
                inodes.add(int(target[5:-1]))
    return inodes


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot): with the pid, it names one process
    even if the pid is reused. None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


@dataclass(frozen=True)
class Traces:
    """What a running sandbox has on the host, recorded to check that kill removed it."""

    id: str
    dir: Path
    cgroup_dirs: tuple[Path, ...]
    processes: frozenset[tuple[int, int | None]]
    netns_inode: int

    @classmethod
    def of(cls, box: NspawnBox) -> Traces:
        return cls(
            box.id,
            box.dir,
            tuple(box.cgroups.dirs),
            frozenset((pid, start_time(pid)) for pid in box.cgroups.pids()),
            box.netns.inode,
        )

    def left(self) -> list[str]:
        """Everything of the sandbox still on the host (empty when it is all gone)."""
        left = [f"mount {m}" for m in mounts_under(self.dir)]
        left += [f"cgroup {d}" for d in self.cgroup_dirs if d.exists()]
        alive = {pid for pid, t in self.processes if t and start_time(pid) == t}
        left += [f"process {pid}" for pid in sorted(alive)]
        if self.netns_inode in net_namespaces_held(alive):
            left.append(f"network namespace {self.netns_inode}")
        if self.dir.exists():
            left.append(f"directory {self.dir}")
        if Path("/run/systemd/nspawn/propagate", self.id).exists():
            left.append(f"/run/systemd/nspawn/propagate/{self.id}")
        left += [f"uid range {base}" for base in uid_ranges.claimed_by(self.dir / RECORD)]
        left += [f"loop device {device}" for device in loop_devices_of(self.dir)]
        return left


def loop_devices_of(box_dir: Path) -> list[str]:
    """Loop devices whose backing file is (or was, if deleted) in `box_dir`."""
    found = subprocess.run(
        ["losetup", "--noheadings", "--list", "--output", "NAME,BACK-FILE"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    prefix = str(box_dir) + "/"
    return [
        line.split()[0] for line in found.stdout.splitlines()
        if len(line.split()) > 1 and line.split(None, 1)[1].startswith(prefix)
    ]  # fmt: skip


def sandbox_ids_left(runtime: NspawnRuntime) -> list[str]:
    """Sandboxes with a directory or a cgroup under the runtime."""
    ids: set[str] = set()
    if runtime.sandboxes_dir.exists():
        ids.update(p.name for p in runtime.sandboxes_dir.iterdir())
    unified = runtime.host.unified / runtime.cgroup_parent
    if unified.exists():
        ids.update(p.name for p in unified.iterdir() if p.is_dir())
    return sorted(ids)
