"""Booting real sandboxes from the base template: envd answers through the sandbox's network
namespace, sandboxes are isolated from each other and from the host, limits are applied, and a
boot that fails leaves nothing behind."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import BootError, SandboxError, TemplateError
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.host.cgroups import Limits, SandboxCgroups
from sandboxd.runtime.nspawn import container
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.nspawn.steps import SandboxDirs
from sandboxd.runtime.spec import RECORD, BootImage
from tests.sandboxd.inside import processes_seen_from, run, sandbox_ids_left
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.anyio]


def new_id() -> str:
    return uuid.uuid4().hex[:16]


@pytest.fixture
def host_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process on the host that no sandbox may see."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


async def test_boot_answers_health_through_the_sandbox_namespace(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    assert await envd_ready(box.dialer)
    # The same port on the host's loopback is someone else's (or nobody's): the sandbox's
    # envd is reachable only from inside its namespace.
    assert box.netns.inode != os.stat("/proc/self/ns/net").st_ino
    reader, writer = await box.netns.open_connection(49983)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 204")
    writer.close()
    await writer.wait_closed()
    assert run(box, "id -un user && command -v python sudo curl git").split()[0] == "user"


async def test_sandboxes_see_neither_each_other_nor_the_host(
    runtime: NspawnRuntime, base_template: Path, host_sleeper: subprocess.Popen[bytes]
) -> None:
    a, b = await asyncio.gather(
        runtime.boot(new_id(), BootImage((base_template,))),
        runtime.boot(new_id(), BootImage((base_template,))),
    )
    run(a, "echo secret-a > /root/only-in-a && systemd-run -q --unit sleeper sleep 300")
    assert run(a, "cat /root/only-in-a") == "secret-a\n"
    assert run(b, "test -e /root/only-in-a || echo absent") == "absent\n"
    assert not Path("/root/only-in-a").exists()
    assert not (base_template / "root/only-in-a").exists()
    assert (SandboxDirs(a.dir).upper / "root/only-in-a").exists()

    seen_by_a, seen_by_b = processes_seen_from(a), processes_seen_from(b)
    assert seen_by_a[1] == seen_by_b[1] == "systemd"  # each its own pid namespace
    assert "python" in seen_by_b.values()  # envd
    # The host's sleep (and the host's hundreds of others) and a's are invisible to b; a sees
    # its own sleep only.
    assert host_sleeper.poll() is None
    assert list(seen_by_a.values()).count("sleep") == 1
    assert "sleep" not in seen_by_b.values()
    assert len(seen_by_b) < 20


async def test_limits_are_written_to_the_sandbox_cgroups(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    limits = Limits(memory_bytes=256 << 20, cpus=0.5, pids=150)
    box = await runtime.boot(new_id(), BootImage((base_template,)), limits)
    cg = box.cgroups
    if runtime.host.pure_v2:
        assert (cg.unified / "memory.max").read_text() == f"{256 << 20}\n"
        assert (cg.unified / "cpu.max").read_text() == "50000 100000\n"
        assert (cg.unified / "pids.max").read_text() == "150\n"
    else:
        v1 = {d.parts[-3]: d for d in cg.dirs}
        assert (v1["memory"] / "memory.limit_in_bytes").read_text() == f"{256 << 20}\n"
        assert (v1["cpu"] / "cpu.cfs_quota_us").read_text() == "50000\n"
        assert (v1["pids"] / "pids.max").read_text() == "150\n"
    # The container itself is inside them: its init's cgroups are the sandbox's.
    with open(f"/proc/{box.leader_pid}/cgroup") as f:
        lines = f.read().splitlines()
    assert all(f"/{runtime.cgroup_parent}/{box.id}" in line for line in lines if "memory" in line)
    usage = runtime.stats(box)
    assert 0 < usage.memory_bytes < 256 << 20
    assert 0 < usage.pids <= 150
    assert usage.cpu_usec > 0


async def test_envd_gets_its_priority_from_the_host(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    """In its user namespace the container cannot give envd nice -20 (the unit's setting is
    reset by the boot's drop-in); sandboxd gives it from the host, to every thread."""
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    procs = box.cgroups.payload / "system.slice/envd.service/cgroup.procs"
    (pid,) = [int(p) for p in procs.read_text().split()]
    for task in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        assert int(stat.rsplit(")", 1)[1].split()[16]) == -20
    assert "zz-sandbox-userns.conf" in run(box, "systemctl show -P DropInPaths envd")
    assert run(box, "systemctl is-failed envd || true").strip() == "active"


async def test_envd_metrics_report_the_sandbox_not_the_host(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    limits = Limits(memory_bytes=384 << 20, cpus=1, pids=500)
    box = await runtime.boot(new_id(), BootImage((base_template,)), limits, disk_mb=256)
    metrics = json.loads(run(box, "curl -sf http://127.0.0.1:49983/metrics"))
    assert metrics["mem_total"] == 384 << 20
    assert metrics["mem_total_mib"] == 384
    assert 0 < metrics["mem_used"] < 384 << 20
    assert metrics["cpu_count"] == 1
    assert 0 < metrics["disk_total"] <= 256 << 20  # the sandbox's disk, less ext4's own
    assert 0 < metrics["disk_used"] < metrics["disk_total"]
    run(box, "head -c 64M /dev/zero > /root/64m && sync")
    grown = json.loads(run(box, "curl -sf http://127.0.0.1:49983/metrics"))
    assert grown["disk_used"] >= metrics["disk_used"] + (60 << 20)


async def test_a_missing_template_leaves_nothing(runtime: NspawnRuntime, tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="no template root filesystem"):
        await runtime.boot(new_id(), BootImage((tmp_path / "no-such-rootfs",)))
    assert sandbox_ids_left(runtime) == []


async def test_a_template_nspawn_refuses_leaves_nothing(
    runtime: NspawnRuntime, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    (broken / "sbin").mkdir(parents=True)
    (broken / "sbin/init").symlink_to("/nowhere")
    with pytest.raises(BootError, match="systemd-nspawn exited"):
        await runtime.boot(new_id(), BootImage((broken,)))
    assert sandbox_ids_left(runtime) == []


async def test_envd_never_answering_times_out_and_leaves_nothing(
    tmp_path: Path, cgroup_parent: str, base_template: Path
) -> None:
    # Nothing listens on port 1 inside: the boot succeeds but "envd" never answers.
    never = functools.partial(envd_ready, port=1)
    rt = NspawnRuntime(
        tmp_path / "sandboxes", cgroup_parent, boot_timeout_s=3, probe=never, guest_unit=ENVD_UNIT
    )
    with pytest.raises(BootError, match=r"no answer from the guest agent after 3 s"):
        await rt.boot(new_id(), BootImage((base_template,)))
    assert sandbox_ids_left(rt) == []


async def test_bad_and_duplicate_ids_are_refused(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    for bad in ("", "has-dash", "UPPER", "a" * 64, "../x"):
        with pytest.raises(SandboxError, match="only a-z and 0-9"):
            await runtime.boot(bad, BootImage((base_template,)))
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    with pytest.raises(SandboxError, match="already exists"):
        await runtime.boot(box.id, BootImage((base_template,)))
    assert await envd_ready(box.dialer)  # the refused boot touched nothing of it


async def _container_init_up(runtime: NspawnRuntime, sandbox_id: str) -> None:
    """Until the container's PID 1 runs: the boot is then waiting for envd, which starts some
    hundreds of milliseconds later, after systemd's early units."""
    cgroups = SandboxCgroups(runtime.host, runtime.cgroup_parent, sandbox_id)
    while True:
        supervisor = container.supervisor(cgroups) if cgroups.exists() else None
        if supervisor is not None and container.leader(supervisor) is not None:
            return
        await asyncio.sleep(0.005)


# Cancelled as soon as the boot has claimed its id, once the launch thread has written the record
# (then come the host steps), and while the boot waits for envd (a fixed delay would not do:
# boots got faster than any safe guess).
@pytest.mark.parametrize("cancel_at", ["at once", "launching", "waiting for envd"])
async def test_a_cancelled_boot_leaves_nothing(
    runtime: NspawnRuntime, base_template: Path, cancel_at: str
) -> None:
    sandbox_id = new_id()
    boot = asyncio.ensure_future(runtime.boot(sandbox_id, BootImage((base_template,))))
    if cancel_at == "at once":
        await asyncio.sleep(0)  # the boot claims its id and hands the launch to its thread
    elif cancel_at == "launching":
        record = runtime.sandboxes_dir / sandbox_id / RECORD
        await wait_until_async(record.exists, 60, "the launch thread to write the record")
    elif cancel_at == "waiting for envd":
        await asyncio.wait_for(_container_init_up(runtime, sandbox_id), 60)
    assert not boot.done(), f"the boot ended before it could be cancelled {cancel_at}"
    boot.cancel()
    with pytest.raises(asyncio.CancelledError):
        await boot
    assert sandbox_ids_left(runtime) == []
