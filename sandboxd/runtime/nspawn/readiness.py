"""The end of a boot: waiting for nspawn, the container's leader and then the guest agent, with
envd's processes given their priority as soon as they show (its start-up is mostly imports,
which a busy host's other work would otherwise slow down)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, NamedTuple

from sandboxd.errors import BootError
from sandboxd.host.netns import NetNamespace
from sandboxd.runtime.nspawn import container
from sandboxd.runtime.nspawn.box import NspawnBox, envd_pids

if TYPE_CHECKING:
    from sandboxd.host.cgroups import SandboxCgroups
    from sandboxd.runtime.dialer import ReadinessProbe
    from sandboxd.runtime.nspawn.steps import SandboxDirs
    from sandboxd.runtime.spec import SandboxSpec

POLL_S = 0.01


async def await_boot(
    spec: SandboxSpec,
    dirs: SandboxDirs,
    cgroups: SandboxCgroups,
    probe: ReadinessProbe,
    guest_unit: str,
    started: float,
    timeout_s: float,
) -> NspawnBox:
    """The booting sandbox's box once `probe` finds its guest agent ready (polled every 10 ms).

    Raises:
        BootError: nspawn exited, or `timeout_s` passed since `started` (monotonic) first.
    """
    deadline = _Deadline(started + timeout_s, timeout_s)
    nspawn_pid = leader = None
    while leader is None:
        _check(dirs, cgroups, deadline, "the container's init")
        nspawn_pid = nspawn_pid or container.supervisor(cgroups)
        leader = container.leader(nspawn_pid) if nspawn_pid else None
        if leader is None:
            await asyncio.sleep(POLL_S)
    assert nspawn_pid is not None  # noqa: S101  # found together with the leader
    netns = NetNamespace(leader)
    box = NspawnBox.of(spec, dirs.dir, cgroups, nspawn_pid, leader, netns)
    prioritised = False
    try:
        while True:
            prioritised = prioritised or cgroups.prioritise(envd_pids(box, guest_unit))
            if await probe(netns):
                break
            _check(dirs, cgroups, deadline, "the guest agent")
            await asyncio.sleep(POLL_S)
    except BaseException:
        netns.close()
        raise
    if not prioritised:
        cgroups.prioritise(envd_pids(box, guest_unit))
    return box


class _Deadline(NamedTuple):
    at: float  # monotonic
    timeout_s: float


def _check(
    dirs: SandboxDirs, cgroups: SandboxCgroups, deadline: _Deadline, waiting_for: str
) -> None:
    if not cgroups.populated():
        raise BootError(f"systemd-nspawn exited{dirs.console_tail()}")
    if time.monotonic() > deadline.at:
        raise BootError(
            f"no answer from {waiting_for} after {deadline.timeout_s:g} s{dirs.console_tail()}"
        )
