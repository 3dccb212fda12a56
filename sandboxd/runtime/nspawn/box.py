"""A sandbox as the nspawn engine holds it: the engine-neutral handle (sandboxd.runtime.engine)
and what only nspawn has, its pid, the container's leader and its pinned network namespace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.host.netns import NetNamespace
from sandboxd.runtime.engine import Box
from sandboxd.runtime.nspawn import container

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.host.cgroups import SandboxCgroups
    from sandboxd.runtime.spec import SandboxSpec


@dataclass
class NspawnBox(Box):
    """Besides the handle: nspawn's pid, the container's leader (its PID 1 as the host sees
    it) and its network namespace, pinned until `NspawnRuntime.release` (it is the handle's
    dialer)."""

    nspawn_pid: int
    leader_pid: int
    netns: NetNamespace

    @classmethod
    def of(cls, spec: SandboxSpec, box_dir: Path, cgroups: SandboxCgroups, nspawn_pid: int,
           leader_pid: int, netns: NetNamespace) -> NspawnBox:  # fmt: skip
        return cls(spec, box_dir, cgroups, netns, nspawn_pid, leader_pid, netns)


def running(spec: SandboxSpec, box_dir: Path, cgroups: SandboxCgroups) -> NspawnBox | None:
    """The sandbox of `spec` if its nspawn and container run, its network namespace pinned."""
    nspawn_pid = container.supervisor(cgroups)
    leader = container.leader(nspawn_pid) if nspawn_pid else None
    if nspawn_pid is None or leader is None:
        return None
    try:
        netns = NetNamespace(leader)
    except OSError:
        return None
    return NspawnBox.of(spec, box_dir, cgroups, nspawn_pid, leader, netns)


def own(box: Box) -> NspawnBox:
    """`box` as the nspawn engine's. Raises TypeError for a box another engine made."""
    if not isinstance(box, NspawnBox):
        raise TypeError(f"sandbox {box.id} is not an nspawn sandbox")
    return box


def envd_pids(box: NspawnBox, guest_unit: str) -> list[int]:
    """envd's processes: its unit's under systemd, or the stub init's one child (envd)."""
    if box.spec.init == "systemd":
        return box.cgroups.unit_pids(guest_unit)
    return container.children(box.leader_pid)
