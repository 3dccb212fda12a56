"""Booting a sandbox is an ordered list of host steps, and removing one is the same list undone
in reverse. Each step makes one thing from the sandbox's spec and knows how to undo it; an undo
is idempotent and does nothing for what was never made, so a failed boot, a kill, a retried
kill and the removal of a dead sandbox's leftovers after a restart all run `undo_all` on the
record, wherever the boot or an earlier teardown stopped.

The order (docs/sandboxd.md, "Host steps"): cgroups with the limits, handed to the
sandbox's uid range; the writable layer (sandboxd.host.disk) and the unit drop-ins a user-namespaced
boot needs in it; the template's layers, idmapped to the range; the overlay root over them; the
volumes mounted in it, idmapped too; nspawn in a user namespace of the range; with a network slot, its resolver written into the
writable layer before the overlay, and its veth pair and firewall chain once nspawn made the
container's network namespace.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path  # used at run time by dataclasses
from typing import TYPE_CHECKING, Protocol

from sandboxd.errors import BootError, HostError, TeardownError
from sandboxd.host import disk, libc, mount_point, overlay
from sandboxd.host.cgroups import CgroupHost, SandboxCgroups
from sandboxd.host.removal import detach_mounts, unmount
from sandboxd.host.userns import mapped_namespace
from sandboxd.network import firewall, resolv_conf, slots
from sandboxd.runtime.nspawn import container

if TYPE_CHECKING:
    from sandboxd.runtime.spec import Leftover, SandboxSpec

log = logging.getLogger("sandboxd.runtime.nspawn.steps")

CONSOLE_LOG = "console.log"
RESOLV_CONF = "etc/resolv.conf"


@dataclass(frozen=True)
class SandboxDirs:
    """Where a sandbox's parts live in its directory."""

    dir: Path

    @property
    def console_log(self) -> Path:
        return self.dir / CONSOLE_LOG

    def console_tail(self, lines: int = 5) -> str:
        """The console's last non-blank `lines`, as a boot error's end ("; console: ..."),
        or nothing."""
        try:
            text = self.console_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return "; console: " + " | ".join(tail) if tail else ""

    @property
    def disk_image(self) -> Path:
        return self.dir / "disk.img"

    @property
    def disk(self) -> Path:
        """The writable layer's mount point (a plain directory when the disk has no limit)."""
        return self.dir / "disk"

    @property
    def upper(self) -> Path:
        return self.disk / "upper"

    @property
    def work(self) -> Path:
        return self.disk / "work"

    @property
    def layers(self) -> Path:
        """`layers/N`: the template's N-th layer, idmapped to the sandbox's range."""
        return self.dir / "layers"

    @property
    def root(self) -> Path:
        """The overlay: the container's `/`."""
        return self.dir / "root"


class Step(Protocol):
    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        """Raises OSError or SandboxError; what was made is undone by `undo`."""

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        """Raises TeardownError when something would not go (a retry continues)."""


@dataclass(frozen=True)
class Cgroups:
    host: CgroupHost
    parent: str

    def of(self, sandbox_id: str) -> SandboxCgroups:
        return SandboxCgroups(self.host, self.parent, sandbox_id)

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        cgroups = self.of(spec.id)
        cgroups.create(spec.limits)
        cgroups.delegate(spec.uid_base)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        self.of(spec.id).remove()


@dataclass(frozen=True)
class Disk:
    pristine: Path  # where each size's empty image is kept

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        disk.make(dirs.disk_image, dirs.disk, spec.disk_mb, spec.uid_base, self.pristine)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        disk.undo(dirs.disk_image, dirs.disk)


# A sandbox's root is root only in its own user namespace: the kernel refuses it a realtime I/O
# class, a negative nice and a negative OOM score adjustment, and envd.service (whose unit asks
# for all three, as a VM's should) failed with 211/IOPRIO and restarted forever. Each boot's
# writable layer gets a drop-in for the guest agent's unit resetting them, so any template with
# envd boots unchanged and the same image still gives envd its priorities in a VM; sandboxd
# gives envd its nice value from the host instead (`SandboxCgroups.prioritise`).
USERNS_OVERRIDES = "[Service]\nIOSchedulingClass=\nIOSchedulingPriority=\nNice=\nOOMScoreAdjust=\n"


def unit_overrides(unit: str) -> dict[str, str]:
    """The drop-ins for the systemd unit `unit`, by path relative to the root."""
    return {f"etc/systemd/system/{unit}.d/zz-sandbox-userns.conf": USERNS_OVERRIDES}


def written_by_sandboxd(unit: str) -> tuple[str, ...]:
    """What the steps write into every writable layer (Resolver and UnitOverrides for `unit`),
    relative to the root."""
    return (RESOLV_CONF, *unit_overrides(unit))


@dataclass(frozen=True)
class UnitOverrides:
    """`unit_overrides(unit)` written into the upper directory (before the overlay is mounted
    over it), owned by the sandbox's root; they go with the writable layer. `unit`: the guest
    agent's (sandboxd.guest hands its name in)."""

    unit: str

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        if spec.init != "systemd":  # no units: nspawn runs envd itself (.container)
            return
        for name, text in unit_overrides(self.unit).items():
            _owned_file(dirs.upper, name, text, spec.uid_base)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        """Nothing of its own to undo: the files are in the writable layer."""


class Layers:
    """Each read-only layer bound through an idmapped mount: the template's files (owned by host
    uid 0..65535) appear owned by the sandbox's range, so sandbox root owns / without a chown or
    a copy of the template."""

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        dirs.layers.mkdir(mode=0o700, exist_ok=True)
        userns = mapped_namespace(spec.uid_base)
        for i, layer in enumerate(spec.layers):
            target = dirs.layers / str(i)
            target.mkdir(exist_ok=True)
            libc.idmapped_bind(str(layer), str(target), userns)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        detach_mounts(dirs.layers)


class Overlay:
    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        lowers = [dirs.layers / str(i) for i in range(len(spec.layers))]
        overlay.mount(lowers, dirs.upper, dirs.work, dirs.root)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        unmount(dirs.root)


class Volumes:
    """Each volume mount's host directory bound read-write onto its path in the overlay root,
    idmapped as the layers are: its files' ids 0..65535 are the sandbox's inside, and stay
    those on the host whichever sandbox wrote them. nspawn takes the root with the mounts in it
    (sandboxd.host.budget binds it recursively). The mount points are made and opened without
    leaving the root whatever links it holds (sandboxd.host.mount_point), a mount inside
    another's after it."""

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        if not spec.mounts:
            return
        userns = mapped_namespace(spec.uid_base)
        for mount in sorted(spec.mounts, key=lambda m: m.path_inside.count("/")):
            try:
                target = mount_point.open_dir(dirs.root, mount.path_inside, spec.uid_base)
            except OSError as exc:
                raise BootError(f"volume mount at {mount.path_inside}: {exc.strerror}") from exc
            try:
                libc.idmapped_bind(str(mount.host_dir), target, userns, writable=True)
            finally:
                os.close(target)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        """Whatever is mounted below the root, record or not (the overlay comes off next)."""
        detach_mounts(dirs.root, below_only=True)


@dataclass(frozen=True)
class Nspawn:
    """The container, inside the sandbox's cgroups. Its undo ends every process of the
    sandbox (cgroup.kill: nspawn and the container, frozen or not) and nspawn's leftovers."""

    cgroups: Cgroups

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        container.start(dirs.root, spec.id, dirs.console_log, self.cgroups.of(spec.id),
                     spec.uid_base, spec.init, io_uring=spec.io_uring)  # fmt: skip

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        cgroups = self.cgroups.of(spec.id)
        cgroups.kill()
        cgroups.wait_empty(timeout_s=10)
        container.remove_leftovers(spec.id)


def _owned_file(root: Path, name: str, text: str, uid: int) -> None:
    """`root/name` with `text`, it and the directories made for it owned by `uid`."""
    path = root
    for part in Path(name).parts[:-1]:
        path /= part
        path.mkdir(exist_ok=True)
        os.chown(path, uid, uid)
        path.chmod(0o755)  # serve's umask is 077: the sandbox's users read these
    path /= Path(name).name
    path.write_text(text)
    os.chown(path, uid, uid)
    path.chmod(0o644)


class Resolver:
    """The sandbox's /etc/resolv.conf naming its gateway, where serve's DNS forwarder answers,
    in the writable layer (nspawn leaves the file alone with a private network). Without a
    slot the template's file stays."""

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        if spec.net is None:
            return
        _owned_file(dirs.upper, RESOLV_CONF, resolv_conf.text([spec.net.host_ip]), spec.uid_base)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        """Nothing of its own to undo: the file is in the writable layer."""


@dataclass(frozen=True)
class Veth:
    """The sandbox's veth pair and firewall chain (sandboxd.network.slots, .firewall). The
    chain comes first: an interface without one gets nothing. Made and undone only in the
    network namespace the slot was made in (a sandboxd serving elsewhere leaves them alone:
    that namespace's are not its own, and they go with the namespace)."""

    cgroups: Cgroups
    timeout_s: float = 30

    def make(self, spec: SandboxSpec, dirs: SandboxDirs) -> None:
        slot = spec.net
        if slot is None:
            return
        firewall.add_sandbox(slot.ifname, slot.sandbox_ip)
        slots.make_link(slot, self._leader(spec.id))

    def _leader(self, sandbox_id: str) -> int:
        """The container's PID 1, once it is in its own network namespace (milliseconds)."""
        cgroups = self.cgroups.of(sandbox_id)
        deadline = time.monotonic() + self.timeout_s
        while True:
            supervisor = container.supervisor(cgroups)
            leader = container.leader(supervisor) if supervisor else None
            if leader is not None:
                return leader
            if not cgroups.populated() or time.monotonic() > deadline:
                raise BootError(f"sandbox {sandbox_id}: no container to give a network")
            time.sleep(0.005)

    def undo(self, spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
        slot = spec.net
        if slot is None:
            return
        if slot.netns != slots.own_netns_inode():
            log.warning("sandbox %s: its network is in another namespace; left alone", spec.id)
            return
        slots.remove_link(slot.ifname)
        try:
            firewall.remove_sandbox(slot.ifname)
        except HostError as e:
            raise TeardownError(f"sandbox {spec.id}: {e}") from e


def boot_steps(
    host: CgroupHost, cgroup_parent: str, disk_images: Path, guest_unit: str
) -> list[Step]:
    cgroups = Cgroups(host, cgroup_parent)
    return [cgroups, Disk(disk_images), UnitOverrides(guest_unit), Resolver(), Layers(), Overlay(),
            Volumes(), Nspawn(cgroups), Veth(cgroups)]  # fmt: skip


def make_all(steps: list[Step], spec: SandboxSpec, dirs: SandboxDirs) -> None:
    """Make every step in order; the first failure propagates (`undo_all` cleans up)."""
    for step in steps:
        step.make(spec, dirs)


def undo_all(steps: list[Step], spec: SandboxSpec | Leftover, dirs: SandboxDirs) -> None:
    """Undo every step, last first.

    Raises:
        TeardownError: a step could not be undone; the ones before it in the list were not
            tried (they depend on it), and calling this again continues.
    """
    for step in reversed(steps):
        step.undo(spec, dirs)
