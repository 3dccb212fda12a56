"""Booting a root filesystem with systemd-nspawn, detached: nspawn runs in its own session with
its console in a file (never a pipe: nspawn dies at the next console write once the reader is
gone), inside the sandbox's cgroups from before its exec, and is never our child, so a sandbox
outlives a sandboxd restart and is found again from its cgroups. (docs/sandboxd.md, "The boot")
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.errors import BootError, HostError, TemplateError
from sandboxd.host import budget
from sandboxd.host.removal import remove_tree
from sandboxd.host.uid_ranges import RANGE_SIZE
from sandboxd.layers import layer_view

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandboxd.host.cgroups import SandboxCgroups
    from sandboxd.runtime.spec import BootImage, Init

PROPAGATE_DIR = Path("/run/systemd/nspawn/propagate")


# The umask the container's processes start with (as in E2B's sandboxes and Debian's default),
# and the programs that make trees sandboxes read: not serve's own 077 (sandboxd.daemon.state_dir).
SANDBOX_UMASK = 0o022
# Where the envd layer (sandboxd.builds.envd_layer) has the self-contained artifact's launcher:
# install.sh --artifact's prefix /usr/lib/envd. The `envd` init runs it by this path rather than
# /usr/bin/envd, which an image could have a program of its own at.
ENVD_LAUNCHER = "/usr/lib/envd/bin/envd"
# What envd.service gives envd that a user namespace allows and nspawn can set: its open-file
# limit (whose hard limit sandboxd raises before nspawn starts, where it may; the container's
# root may not). The
# rest of the unit is lost without systemd: Restart= (envd exiting ends the container, as PID 2
# under the stub init), Type=notify (sandboxd waits for /health either way), KillMode=process
# (nothing restarts envd), and CPUWeight=, IOWeight=, MemoryMin=/Low= (no cgroup of envd's own
# inside the sandbox's); nice -20 and the OOM score adjustment come from the host in both modes
# (SandboxCgroups.prioritise), the realtime I/O class in neither.
ENVD_NOFILE = 1048576
ENVD_INIT_OPTIONS = (f"--rlimit=NOFILE={ENVD_NOFILE}", "--rlimit=CORE=infinity")
# io_uring off, as gVisor, Docker's default seccomp profile and ChromeOS have it: a large kernel
# surface behind much of recent years' local privilege escalations, that nspawn's own filter
# allows. A blocked call fails with EPERM (docs/sandboxd.md, "System calls").
NO_IO_URING = "--system-call-filter=~io_uring_setup io_uring_enter io_uring_register"


def require_rootfs(image: BootImage) -> None:
    """Raises TemplateError unless `image`'s layers are directories and one of them has what
    its init starts: /sbin/init (systemd), or the envd layer's launcher (envd)."""
    if not image.layers:
        raise TemplateError("an image of no layers")
    for layer in image.layers:
        if not layer.is_dir():
            raise TemplateError(f"no template root filesystem at {layer}")
    # Found as the stack has it (a link too: nspawn says what is wrong with it), or with the
    # image's links resolved inside it: a layer above the image's (systemd's,
    # sandboxd.builds.systemd_init) has /sbin/init under the image's /sbin link, as usr/sbin.
    # Never through the host's paths: a pause layer's links are a sandbox's.
    needed = "/sbin/init" if image.init == "systemd" else ENVD_LAUNCHER
    if not layer_view.lexists(image.layers, needed) and (
        layer_view.resolve(image.layers, needed) is None
    ):
        where = ", ".join(str(layer) for layer in image.layers)
        raise TemplateError(f"no {needed} in the template's layers ({where})")


def command(
    root: Path,
    machine: str,
    init: Init = "systemd",
    rlimits: Sequence[str] = (),
    io_uring: bool = False,
) -> list[str]:
    """The nspawn command line. --register=no and --keep-unit: no systemd or D-Bus needed on
    the host (nspawn then uses the cgroup it starts in); --private-network: a network namespace
    with only a loopback; a unique --machine, or containers would share a propagate directory;
    --private-users=0:65536: a user namespace mapping the container's ids 0..65535 to the
    sandbox's range (nspawn runs in the sandbox's budget namespace, sandboxd.host.budget, whose
    ids 0..65535 are the range's), with ownership left alone (the root is already seen owned by
    the range through its idmapped layers and its upper directory). No --bind of any kind:
    nothing of the host is visible inside. nspawn's system-call filter stays on, io_uring
    taken out of it (NO_IO_URING) unless `io_uring` (a template that asks for it).
    --timezone=off: the image's time zone (UTC in base, as E2B's), and no /etc/localtime
    written by nspawn into the writable layer, which a build would otherwise find in its step's
    layer.

    `init` "systemd" boots the image's systemd (--boot); "envd" runs envd as root under
    nspawn's stub init (--as-pid2), which reaps every orphaned process as a PID 1 must, with
    -isnotfc as packaging/isnotfc.conf gives it under systemd (a container, not a VM).
    `rlimits`: more --rlimit= options (`host_init_limits()`)."""
    how = ["--boot"] if init == "systemd" else ["--as-pid2", *ENVD_INIT_OPTIONS]
    program = [] if init == "systemd" else ["--", ENVD_LAUNCHER, "-isnotfc"]
    return [
        "systemd-nspawn",
        "--quiet",
        "-D",
        str(root),
        "--machine",
        machine,
        *how,
        "--register=no",
        "--keep-unit",
        "--private-network",
        f"--private-users=0:{RANGE_SIZE}",
        *rlimits,
        "--private-users-ownership=off",
        "--timezone=off",
        *([] if io_uring else [NO_IO_URING]),
        *program,
    ]


def host_init_limits() -> list[str]:
    """The host's PID 1's process and pending-signal limits, which nspawn gives the container
    and reads itself unless told; in the budget namespace it may not (another uid's process)."""
    limits = []
    for name in ("NPROC", "SIGPENDING"):
        soft, hard = resource.prlimit(1, getattr(resource, f"RLIMIT_{name}"))
        limits.append(f"--rlimit={name}={_limit(soft)}:{_limit(hard)}")
    return limits


def _limit(value: int) -> str:
    return "infinity" if value == resource.RLIM_INFINITY else str(value)


def start(
    root: Path,
    machine: str,
    console_log: Path,
    cgroups: SandboxCgroups,
    uid_base: int,
    init: Init = "systemd",
    io_uring: bool = False,
) -> None:
    """Start nspawn detached: `setsid --fork` makes it a grandchild that PID 1 adopts.

    Raises:
        HostError: systemd-nspawn or setsid is missing.
        BootError: the launcher failed (e.g. the cgroups could not be entered).
    """
    for tool in ("systemd-nspawn", "setsid"):
        if shutil.which(tool) is None:
            raise HostError(f"{tool} is missing (scripts/install installs it)")

    def in_sandbox() -> None:
        """Between fork and exec (only system calls): into the sandbox's cgroups, back to the
        default priority, whatever sandboxd runs at (`sandboxd.daemon.machinery.SERVE_NICE`), and into its
        budget namespace. First the open-file limit nspawn gives envd: only a capability in the
        host's namespace may raise a hard limit (without it nspawn sets the closest it may)."""
        cgroups.enter()
        os.setpriority(os.PRIO_PROCESS, 0, 0)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        with contextlib.suppress(ValueError, OSError):  # where sandboxd has CAP_SYS_RESOURCE
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, ENVD_NOFILE))
        budget.enter(ns, root)

    budget.NSPAWN_STATE.mkdir(parents=True, exist_ok=True)
    try:
        ns = budget.budget_namespace(uid_base)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BootError(f"cannot make {machine}'s budget namespace: {exc}") from exc
    with open(console_log, "ab") as log, open(os.devnull, "rb") as null:
        try:
            launcher = subprocess.run(
                [
                    "setsid",
                    "--fork",
                    *command(budget.LAUNCH_ROOT, machine, init, host_init_limits(), io_uring),
                ],
                stdin=null,
                stdout=log,
                stderr=log,
                preexec_fn=in_sandbox,
                umask=SANDBOX_UMASK,  # what the container's processes start with, not serve's
                close_fds=True,
                check=False,
                timeout=10,
            )
        except subprocess.SubprocessError as exc:
            raise BootError(f"cannot start systemd-nspawn for {machine}: {exc}") from exc
    if launcher.returncode != 0:
        raise BootError(f"setsid for {machine}'s systemd-nspawn exited {launcher.returncode}")


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name may hold spaces and parentheses: fields start after the last ')'.
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


def supervisor(cgroups: SandboxCgroups) -> int | None:
    """nspawn's own pid: the nspawn in the sandbox whose parent is outside it (the container's
    processes and nspawn's transient outer child all descend from it). None when nspawn is
    gone, even if the container's processes were orphaned and live on.

    The cgroup tree is read one directory at a time while nspawn moves itself into
    `supervisor`, a directory it creates then: a read can miss nspawn and see only its outer
    child, whose parent then looks outside too. A parent that is itself an nspawn rules that
    child out (a wrong pid here would be waited on until the boot timed out)."""
    pids = cgroups.pids()
    roots = [
        p
        for p in pids
        if _comm(p) == "systemd-nspawn"
        and (parent := _ppid(p)) not in pids
        and (parent is None or _comm(parent) != "systemd-nspawn")
    ]
    return roots[0] if len(roots) == 1 else None


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []
    return found


def _namespace(pid: int, kind: str) -> str | None:
    """None once `pid` is gone. The kernel answers EACCES, not ENOENT, for a process reaped
    between the path's lookup and the readlink (nspawn's outer child exits while we look)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def leader(nspawn_pid: int) -> int | None:
    """The container's PID 1 as the host sees it: nspawn's child in other pid and network
    namespaces. nspawn's first child is a transient "outer child" in ours; and the leader moves
    into its private network namespace only after it appears, so a leader still in nspawn's
    network namespace is not ready to be pinned."""
    own = {kind: _namespace(nspawn_pid, kind) for kind in ("pid", "net")}
    for child in children(nspawn_pid):
        theirs = {kind: _namespace(child, kind) for kind in own}
        if None not in theirs.values() and all(theirs[k] != own[k] for k in own):
            return child
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def terminate(nspawn_pid: int) -> None:
    """Ask for an orderly power-off (SIGTERM to nspawn). A frozen container cannot react until
    it is thawed; `SandboxCgroups.kill` is the way to stop it at once."""
    try:
        os.kill(nspawn_pid, signal.SIGTERM)
    except ProcessLookupError:
        return


def remove_leftovers(machine: str) -> None:
    """nspawn killed by SIGKILL leaves /run/systemd/nspawn/propagate/MACHINE behind."""
    remove_tree(PROPAGATE_DIR / machine)
