"""A sandbox's life after boot: freeze and thaw, kill that leaves nothing behind, adoption by a
new NspawnRuntime after a restart, and many create/kill cycles without leaks."""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import SandboxError
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.host.removal import mounts_under
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import RECORD, BootImage
from tests.sandboxd.inside import Traces, run, sandbox_ids_left
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.runtime.nspawn.box import NspawnBox

pytestmark = [pytest.mark.root, pytest.mark.anyio]

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /root/counter; sleep 0.1; done"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def counter(box: NspawnBox) -> int:
    try:
        text = (box.dir / "root/root/counter").read_text().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text else 0  # empty while the shell rewrites it


async def start_counter(box: NspawnBox) -> None:
    # systemd-run: the counter runs in the container's cgroups (nsenter alone would not).
    run(box, f"systemd-run -q --unit counter sh -c '{COUNTER}'")
    await wait_until_async(lambda: counter(box) >= 3, 10, "the counter to count")


async def test_freeze_stops_everything_and_thaw_continues_it(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    await start_counter(box)
    counting = run(box, "systemctl show -P MainPID counter").strip()
    await runtime.freeze(box)
    assert box.frozen
    stopped_at = counter(box)
    assert not await envd_ready(box.dialer, timeout_s=0.5)  # no answer at all
    assert counter(box) == stopped_at
    assert runtime.stats(box).pids > 0  # processes (and their memory) kept
    await runtime.thaw(box)
    assert not box.cgroups.frozen()  # (box.frozen reads the same file)
    assert await envd_ready(box.dialer, timeout_s=1)
    await wait_until_async(lambda: counter(box) > stopped_at, 5, "the counter to go on")
    # It went on from where it stopped, it did not start over: the same process counts on.
    assert run(box, "systemctl show -P MainPID counter").strip() == counting != "0"


async def test_kill_leaves_nothing_behind(runtime: NspawnRuntime, base_template: Path) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    await start_counter(box)
    traces = Traces.of(box)
    assert len(traces.processes) >= 4
    assert traces.left()
    await runtime.kill(box)
    assert traces.left() == []
    with pytest.raises(OSError, match="closed"):
        await box.netns.connect(49983)


async def test_kill_of_a_frozen_sandbox_leaves_nothing_behind(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    await runtime.freeze(box)
    traces = Traces.of(box)
    await runtime.kill(box)
    assert traces.left() == []


async def test_a_new_runtime_adopts_running_and_frozen_sandboxes(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    running = await runtime.boot(new_id(), BootImage((base_template,)))
    frozen = await runtime.boot(new_id(), BootImage((base_template,)))
    await runtime.freeze(frozen)
    # One record as a sandboxd from before boot images had an init wrote it: still adopted.
    record = json.loads((frozen.dir / RECORD).read_text())
    del record["init"]
    (frozen.dir / RECORD).write_text(json.dumps(record))
    # "Restart": drop the old NspawnRuntime's handles, start a new one on the same state.
    runtime.release(running)
    runtime.release(frozen)
    again = NspawnRuntime(
        runtime.sandboxes_dir,
        cgroup_parent=runtime.cgroup_parent,
        probe=envd_ready,
        guest_unit=ENVD_UNIT,
    )
    adopted = {box.id: box for box in again.adopt()}
    assert sorted(adopted) == sorted([running.id, frozen.id])
    a_running, a_frozen = adopted[running.id], adopted[frozen.id]
    assert (a_running.leader_pid, a_running.nspawn_pid) == (running.leader_pid, running.nspawn_pid)
    assert a_running.image == BootImage((base_template,))
    assert a_running.spec == running.spec  # the uid range and disk too, from the record
    assert a_frozen.spec == frozen.spec
    assert not a_running.frozen
    assert a_frozen.frozen
    assert await envd_ready(a_running.dialer)
    await again.thaw(a_frozen)
    assert await envd_ready(a_frozen.dialer, timeout_s=1)
    for box in (a_running, a_frozen):
        traces = Traces.of(box)
        await again.kill(box)
        assert traces.left() == []


async def test_adopt_removes_what_is_left_of_a_dead_sandbox(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    traces = Traces.of(box)
    runtime.release(box)
    box.cgroups.kill()  # the sandbox dies behind the runtime's back (OOM, kill -9, reboot)
    box.cgroups.wait_empty(10)
    assert (
        NspawnRuntime(
            runtime.sandboxes_dir,
            cgroup_parent=runtime.cgroup_parent,
            probe=envd_ready,
            guest_unit=ENVD_UNIT,
        ).adopt()
        == []
    )
    assert traces.left() == []


async def test_freeze_of_a_killed_sandbox_is_a_clear_error(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    await runtime.kill(box)
    with pytest.raises(SandboxError, match="gone"):
        await runtime.freeze(box)
    with pytest.raises(SandboxError, match="gone"):
        runtime.stats(box)


def _open_fds() -> set[str]:
    """This process's descriptors, less the user namespaces sandboxd keeps, one per uid range
    it has used (sandboxd/host/userns.py: a cache, not a leak)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("user:["):
                found.add(fd)
        except FileNotFoundError:
            continue  # the listing's own descriptor
    return found


async def test_create_kill_cycles_leak_nothing(runtime: NspawnRuntime, base_template: Path) -> None:
    cycles = 20
    fds_before = len(_open_fds())
    for _ in range(cycles):
        box = await runtime.boot(new_id(), BootImage((base_template,)))
        assert await envd_ready(box.dialer)
        traces = Traces.of(box)
        await runtime.kill(box)
        assert traces.left() == []
    assert sandbox_ids_left(runtime) == []
    # Everything a sandbox mounts is under its runtime's directory (the host's mount count
    # would also count what other work on the machine mounts meanwhile).
    assert mounts_under(runtime.sandboxes_dir.parent) == []
    assert len(_open_fds()) <= fds_before
    assert list(runtime.sandboxes_dir.iterdir()) == []
