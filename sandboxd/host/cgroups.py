"""A sandbox's cgroups in every hierarchy the host has: limits, placing a process, freeze and
thaw, kill, emptiness, removal and usage. Works on hybrid hosts (v1 controllers plus cgroup2 at
/sys/fs/cgroup/unified) and on pure cgroup2 hosts, detected at run time.

Layout: `PARENT/ID` in each hierarchy. nspawn (started inside it with --keep-unit) adds
`ID/supervisor` (itself) and `ID/payload` (the container) in the name=systemd and cgroup2
hierarchies; freezing `payload` stops the container while nspawn stays responsive.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.errors import HostError, TeardownError

if TYPE_CHECKING:
    from collections.abc import Iterable

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The v1 hierarchies a sandbox gets a cgroup in on a hybrid host. name=systemd is where nspawn
# with --keep-unit takes "its unit's" cgroup; without a cgroup of our own there, every container
# would land in the same /payload.
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "freezer", "name=systemd")
V2_CONTROLLERS = ("memory", "cpu", "pids")
# What a container's systemd needs to own to manage its own cgroups: the
# directory (to make children) and the files that move processes and pass controllers down.
# Never a limit file: the sandbox must not raise its own limits.
DELEGATED_FILES = ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox; None means unlimited."""

    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None


@dataclass(frozen=True)
class Usage:
    cpu_usec: int
    memory_bytes: int
    pids: int


@dataclass(frozen=True)
class CgroupHost:
    """Where the hierarchies are mounted: `unified` is the cgroup2 mount; `v1` maps each v1
    controller we use to its mount point (empty on a pure cgroup2 host)."""

    unified: Path
    v1: dict[str, Path]

    @property
    def pure_v2(self) -> bool:
        return not self.v1

    @classmethod
    def detect(cls) -> CgroupHost:
        """Read /proc/self/mounts.

        Raises:
            HostError: no cgroup2 hierarchy is mounted (freeze and kill need its files).
        """
        unified: Path | None = None
        v1: dict[str, Path] = {}
        with open("/proc/self/mounts") as f:
            for line in f:
                _, where, fstype, options, *_ = line.split()
                if fstype == "cgroup2" and unified is None:
                    unified = Path(where)
                elif fstype == "cgroup":
                    for option in options.split(","):
                        if option in V1_CONTROLLERS:
                            v1.setdefault(option, Path(where))
        if unified is None:
            raise HostError("no cgroup2 hierarchy is mounted (sandboxd needs cgroup.freeze/kill)")
        if unified == CGROUP_ROOT:
            v1 = {}  # a pure cgroup2 host; stray v1 mounts are not ours to use
        else:
            missing = [c for c in ("memory", "cpu", "pids", "name=systemd") if c not in v1]
            if missing:
                raise HostError(f"hybrid cgroups without the {', '.join(missing)} hierarchies")
        return cls(unified, v1)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _make_dir(d: Path) -> None:
    """`d` and its missing parents, 0755 as under the usual umask: serve's is 077, and the
    sandboxes' systemd looks up its own cgroup below them."""
    if d.is_dir():
        return
    _make_dir(d.parent)
    d.mkdir(exist_ok=True)
    d.chmod(0o755)


def _keyed(path: Path) -> dict[str, str]:
    """A flat keyed cgroup file ("key value" lines) as a dict."""
    with open(path) as f:
        return dict(line.split(maxsplit=1) for line in f.read().splitlines() if " " in line)


class SandboxCgroups:
    """The cgroups `PARENT/ID` of one sandbox in every hierarchy of `host`."""

    def __init__(self, host: CgroupHost, parent: str, sandbox_id: str) -> None:
        self.host = host
        self.unified = host.unified / parent / sandbox_id
        self._v1 = {name: mount / parent / sandbox_id for name, mount in host.v1.items()}
        self._parent = host.unified / parent

    @property
    def dirs(self) -> list[Path]:
        """This sandbox's directory in every hierarchy (some share a mount point)."""
        return sorted({self.unified, *self._v1.values()})

    def exists(self) -> bool:
        return self.unified.is_dir()

    def create(self, limits: Limits) -> None:
        """mkdir in every hierarchy and write the limits.

        Raises:
            OSError: a cgroup file could not be written (the caller removes what was made).
        """
        if self.host.pure_v2:
            self._enable_controllers()
        for d in self.dirs:
            _make_dir(d)
        self.set_limits(limits)

    def delegate(self, uid: int) -> None:
        """Hand the sandbox's cgroup in the hierarchies systemd manages (name=systemd and
        cgroup2) to `uid`, its root's host uid, as DELEGATED_FILES says."""
        for d in {self.unified, self._v1.get("name=systemd", self.unified)}:
            os.chown(d, uid, uid)
            for name in DELEGATED_FILES:
                try:
                    os.chown(d / name, uid, uid)
                except FileNotFoundError:
                    continue  # cgroup v1 has no cgroup.threads or subtree_control

    def _enable_controllers(self) -> None:
        """On a pure cgroup2 host the limits' files exist only once the parents pass the
        controllers down (root → PARENT → ID)."""
        _make_dir(self._parent)
        for d in (self.host.unified, self._parent):
            available = (d / "cgroup.controllers").read_text().split()
            wanted = [f"+{c}" for c in V2_CONTROLLERS if c in available]
            if wanted:
                _write(d / "cgroup.subtree_control", " ".join(wanted))

    def set_limits(self, limits: Limits) -> None:
        """Write the limits (they may change while the sandbox runs)."""
        memory = "max" if limits.memory_bytes is None else str(limits.memory_bytes)
        pids = "max" if limits.pids is None else str(limits.pids)
        quota = None if limits.cpus is None else max(1000, round(limits.cpus * CPU_PERIOD_US))
        if self.host.pure_v2:
            _write(self.unified / "memory.max", memory)
            _write(self.unified / "pids.max", pids)
            _write(self.unified / "cpu.max", f"{quota or 'max'} {CPU_PERIOD_US}")
            return
        _write(self._v1["memory"] / "memory.limit_in_bytes", "-1" if memory == "max" else memory)
        _write(self._v1["pids"] / "pids.max", pids)
        _write(self._v1["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(self._v1["cpu"] / "cpu.cfs_quota_us", str(quota or -1))

    def enter(self) -> None:
        """Move the calling process into every hierarchy's cgroup: a `preexec_fn` (between
        fork and exec), so it only writes files."""
        pid = str(os.getpid())
        for d in self.dirs:
            fd = os.open(d / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, pid.encode())
            finally:
                os.close(fd)

    def unit_pids(self, unit: str) -> list[int]:
        """The processes of the container's systemd `unit` (none in a sandbox without systemd)."""
        unit_dir = self.payload / "system.slice" / unit
        return [pid for d, _, _ in os.walk(unit_dir) for pid in _procs(d)]

    def prioritise(self, pids: Iterable[int]) -> bool:
        """Give envd (`pids`, its processes) the priority its unit file asks for in a VM (nice
        -20, OOM score adjustment -1000), which the kernel refuses to the container's own root
        in its user namespace: envd must start quickly on a busy host and keep answering while
        the sandbox's code uses every CPU and all its memory. Every thread it has now (threads
        it starts later inherit the nice value). Returns whether one of `pids` was there. A
        restart of envd inside the sandbox runs it at the default priority again."""
        found = False
        for pid in pids:
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    os.setpriority(os.PRIO_PROCESS, int(task), -20)
                # Needs CAP_SYS_RESOURCE, which root in some containers lacks: the
                # sandbox's other processes (children get 100 from envd) go first anyway.
                with contextlib.suppress(PermissionError):
                    _write(Path(f"/proc/{pid}/oom_score_adj"), "-1000")
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
            found = True
        return found

    def pids(self) -> set[int]:
        """Every process in the sandbox (the whole cgroup2 subtree)."""
        found: set[int] = set()
        for d, _, _ in os.walk(self.unified):
            found.update(_procs(d))
        return found

    def populated(self) -> bool:
        try:
            return _keyed(self.unified / "cgroup.events").get("populated") == "1"
        except FileNotFoundError:
            return False

    @property
    def payload(self) -> Path:
        """The container's cgroup2 directory (nspawn makes it)."""
        return self.unified / "payload"

    def set_frozen(self, frozen: bool) -> None:
        _write(self.payload / "cgroup.freeze", "1" if frozen else "0")

    def frozen(self) -> bool:
        return _keyed(self.payload / "cgroup.events").get("frozen") == "1"

    def kill(self) -> None:
        """SIGKILL every process of the sandbox, nspawn included, frozen ones too."""
        if self.exists():
            _write(self.unified / "cgroup.kill", "1")

    def wait_empty(self, timeout_s: float) -> None:
        """Wait until no process is left (`populated 0`).

        Raises:
            TeardownError: processes were still there after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while self.populated():
            if time.monotonic() > deadline:
                raise TeardownError(f"{self.unified} still has processes {sorted(self.pids())}")
            time.sleep(0.005)

    def remove(self) -> None:
        """rmdir the sandbox's cgroups deepest first (the container's systemd leaves empty
        children such as payload/init.scope behind).

        Raises:
            TeardownError: a cgroup could not be removed (it still has processes).
        """
        for top in self.dirs:
            for d, _, _ in os.walk(top, topdown=False):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise TeardownError(f"cannot remove cgroup {d}: {exc.strerror}") from exc

    def usage(self) -> Usage:
        """CPU time (whole sandbox, nspawn included), memory charged, and process count."""
        cpu = int(_keyed(self.unified / "cpu.stat")["usage_usec"])
        if self.host.pure_v2:
            memory = (self.unified / "memory.current").read_text()
            pids = (self.unified / "pids.current").read_text()
        else:
            memory = (self._v1["memory"] / "memory.usage_in_bytes").read_text()
            pids = (self._v1["pids"] / "pids.current").read_text()
        return Usage(cpu, int(memory), int(pids))


def _procs(cgroup_dir: str) -> list[int]:
    """The pids in one cgroup; none if it was removed while we walked the tree. A cgroup
    removed between listing and opening answers ENODEV rather than ENOENT (its kernfs node is
    gone while the path still resolved)."""
    try:
        with open(os.path.join(cgroup_dir, "cgroup.procs")) as f:
            return [int(line) for line in f]
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV):
            return []
        raise


def existing_sandboxes(host: CgroupHost, parent: str) -> list[str]:
    """The sandbox ids that have a cgroup under `parent` (for adoption after a restart)."""
    try:
        return sorted(e.name for e in os.scandir(host.unified / parent) if e.is_dir())
    except FileNotFoundError:
        return []
