"""Named network namespaces a test makes for itself (`/run/netns/NAME`, as `ip netns add`
makes them): code and processes run inside them, and removing one stops what it started.

Every entry into a namespace checks it landed there before running anything: the harness must
never configure or send from the host's own namespace by mistake.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pyroute2 import IPRoute, netns

from sandboxd.network.slots import in_netns

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

RUN_DIR = Path("/run/netns")


def netns_inode(path: str | Path) -> int:
    return os.stat(path).st_ino


class NetworkNamespace:
    """A network namespace of the test's own, named so that other tools (`ip netns`,
    `nsenter`) can enter it; `remove()` stops the processes `popen` started and deletes it."""

    def __init__(self, name: str) -> None:
        """Create the namespace `name`.

        Raises:
            OSError: a namespace of that name exists already (another run's, or a leftover).
        """
        if not name or "/" in name:
            raise ValueError(f"bad namespace name {name!r}")
        self.name = name
        self.path = RUN_DIR / name
        if self.path.exists():
            raise FileExistsError(f"network namespace {name} exists already")
        netns.create(name)
        self.inode = netns_inode(self.path)
        self.processes: list[subprocess.Popen[bytes]] = []

    def ipr(self) -> IPRoute:
        """Netlink (rtnetlink) inside the namespace. flags=0: never create one by that name."""
        return IPRoute(netns=self.name, flags=0)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on a thread of its own inside the namespace and return its result
        (or raise its exception). Sockets made by `fn` stay in the namespace after it returns.

        setns moves only the calling thread, and that thread ends with `fn`: nothing else of
        the test process ever leaves the host's namespace, and nothing has to switch back.
        """
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

        def checked() -> T:
            here = netns_inode("/proc/thread-self/ns/net")
            if here != self.inode:
                raise RuntimeError(f"setns into {self.name} landed in netns {here}")
            return fn(*args)

        try:
            return in_netns(fd, checked)
        finally:
            os.close(fd)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start `argv` inside the namespace (network only: mounts, pids and the rest stay the
        host's, which `sandboxd serve` needs). nsenter execs `argv`, so the pid is argv's own;
        `remove()` stops it."""
        proc = subprocess.Popen(["nsenter", f"--net={self.path}", "--", *argv], **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """`subprocess.run(argv, check=True, ...)` inside the namespace."""
        return subprocess.run(["nsenter", f"--net={self.path}", "--", *argv], check=True, **kwargs)

    def pids_inside(self) -> list[int]:
        """Every process on the machine in this namespace (by its inode), the removed one's
        leftovers included."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread
                    if os.stat(entry / "ns/net").st_ino == self.inode:
                        found.append(int(entry.name))
        return found

    def remove(self) -> None:
        """Stop the processes started here (SIGTERM, then SIGKILL), by pid, and delete the
        namespace: its interfaces go with it, and a veth's peer in another namespace too."""
        try:
            for proc in self.processes:
                stop(proc)
        finally:
            if self.path.exists():
                netns.remove(self.name)


def stop(proc: subprocess.Popen[bytes], grace_s: float = 5) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
