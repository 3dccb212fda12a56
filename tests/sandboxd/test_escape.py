"""Escape probes (isolation.md §1), each run as root inside a booted sandbox, in the sandbox's
cgroups and every one of its namespaces (a transient unit of the container's systemd, as a
command envd starts as root runs), with the host checked from outside. Each probe is harmless
if it succeeds (a marker file on the host; a host setting it changed is written back at once)
and each test restores what it changed. Before user namespaces, the core_pattern probe ran the
sandbox's script as host root."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.guest.readiness import envd_ready
from sandboxd.host.cgroups import Limits
from sandboxd.host.uid_ranges import FIRST_BASE, RANGE_SIZE
from sandboxd.runtime.nspawn.steps import SandboxDirs
from sandboxd.runtime.spec import BootImage
from tests.sandboxd.inside import run

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sandboxd.runtime.nspawn.box import NspawnBox
    from sandboxd.runtime.nspawn.runtime import NspawnRuntime

pytestmark = [pytest.mark.root, pytest.mark.anyio]

MIB = 1 << 20
AS_ROOT = "Basic " + base64.b64encode(b"root:").decode()
# Host-wide sysctls a sandbox's root tries to write; none may change.
HOST_SYSCTLS = tuple(
    name for name in ("kernel/core_pattern", "kernel/sysrq", "vm/overcommit_memory",
                      "kernel/panic", "fs/inotify/max_user_instances")
    if Path("/proc/sys", name).exists()
)  # fmt: skip


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def as_root(box: NspawnBox, script: str) -> tuple[int | None, str]:
    """(exit code, stdout + stderr) of `sh -c script` started by envd as root (a command of
    the SDK's `commands.run(..., user="root")`): in the sandbox's cgroups, namespaces and
    system-call filter. The exit code is None when a signal ended it. Asserts that it ran."""
    request = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    done = subprocess.run(
        ["nsenter", "-t", str(box.leader_pid), "-n", "curl", "-sS", "--max-time", "120",
         "-H", "Content-Type: application/connect+json", "-H", f"Authorization: {AS_ROOT}",
         "--data-binary", "@-", "http://127.0.0.1:49983/process.Process/Start"],
        input=struct.pack(">BI", 0, len(request)) + request, capture_output=True, check=True,
    )  # fmt: skip
    output, end, stream = b"", None, done.stdout
    while len(stream) >= 5:
        flags, size = struct.unpack(">BI", stream[:5])
        message, stream = json.loads(stream[5 : 5 + size]), stream[5 + size :]
        assert not flags & 2 or not message.get("error"), message  # an end-of-stream error
        event = message.get("event", {})
        data = event.get("data", {})
        output += base64.b64decode(data.get("stdout", "")) + base64.b64decode(
            data.get("stderr", "")
        )
        end = event.get("end", end)
    assert end is not None, f"no end event: {done.stdout[:500]!r}"
    code = None if "signal" in end.get("status", "") else end.get("exitCode", 0)
    return code, output.decode(errors="replace")


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """A path on the host that a successful escape creates: it must never exist."""
    path = tmp_path / f"escaped-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def host_sysctls() -> Iterator[dict[str, str]]:
    """The host's values of HOST_SYSCTLS before the test; any that changed is written back."""
    before = {name: Path("/proc/sys", name).read_text() for name in HOST_SYSCTLS}
    yield before
    for name, value in before.items():
        path = Path("/proc/sys", name)
        if path.read_text() != value:
            path.write_text(value)


def _sysctls_now() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text() for name in HOST_SYSCTLS}


async def test_sandbox_root_is_an_unprivileged_host_uid_of_its_own_range(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    a = await runtime.boot(new_id(), BootImage((base_template,)))
    b = await runtime.boot(new_id(), BootImage((base_template,)))
    ranges = []
    for box in (a, b):
        base = box.uid_base
        assert base >= FIRST_BASE
        ranges.append(range(base, base + RANGE_SIZE))
        pids = box.cgroups.pids() - {box.nspawn_pid}  # nspawn itself is the host's
        assert pids
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            assert all(int(u) in ranges[-1] for u in uids.split()[1:]), (pid, uids)
        # Seen from the host: the sandbox's ids 0..65535 are its range's.
        assert as_root(box, "id -u")[1].split() == ["0"]
        assert Path(f"/proc/{box.leader_pid}/uid_map").read_text().split() == [
            "0",
            str(base),
            str(RANGE_SIZE),
        ]
    assert not set(ranges[0]) & set(ranges[1])


async def test_files_the_sandbox_writes_belong_to_its_range_on_the_host(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    status, out = as_root(box, "echo x > /root/by-root && su user -c 'echo y > /home/user/by-user'")
    assert status == 0, out
    upper = SandboxDirs(box.dir).upper
    assert (upper / "root/by-root").stat().st_uid == box.uid_base
    user_uid = int(run(box, "id -u user"))
    assert (upper / "home/user/by-user").stat().st_uid == box.uid_base + user_uid
    # The template's files are not copied or chowned: still host root's on the host.
    assert (base_template / "etc/passwd").stat().st_uid == 0


async def test_core_pattern_and_host_sysctls_stay_after_a_proc_sys_remount(
    runtime: NspawnRuntime, base_template: Path, marker: Path, host_sysctls: dict[str, str]
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    # The sandbox's script, by its host path (what /proc/self/mountinfo gave away before).
    script = SandboxDirs(box.dir).upper / "escape.sh"
    _status, out = as_root(
        box,
        f"""
        printf '#!/bin/sh\\ntouch {marker}\\n' > /escape.sh && chmod +x /escape.sh
        mount -o remount,rw /proc/sys
        echo '|{script}' > /proc/sys/kernel/core_pattern
        for name in kernel/sysrq vm/overcommit_memory kernel/panic fs/inotify/max_user_instances; do
            [ -e /proc/sys/$name ] && echo 1 > /proc/sys/$name
        done
        ulimit -c unlimited; sh -c 'kill -SEGV $$'
        exit 0
    """,
    )
    changed = _sysctls_now() != host_sysctls  # (the fixture writes any change back)
    assert not changed, out
    assert not marker.exists()
    assert "Permission denied" in out or "Read-only" in out, out


async def test_sys_cannot_be_remounted_read_write(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    status, out = as_root(box, "mount -o remount,rw /sys && touch /sys/kernel/escaped")
    assert status != 0, out


async def test_no_new_cgroup_hierarchy_and_no_release_agent(
    runtime: NspawnRuntime, base_template: Path, marker: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    status, out = as_root(box, "mkdir -p /tmp/cg && mount -t cgroup -o none,name=escape cg /tmp/cg")
    assert status != 0, out
    # The host's hierarchies the container sees from their root (nspawn shows some so): their
    # release_agent is the host's, and must not take the sandbox's script.
    status, out = as_root(
        box,
        f"""
        for agent in /sys/fs/cgroup/*/release_agent; do
            [ -e "$agent" ] && echo {marker} > "$agent" && echo "wrote $agent"
        done
        exit 0
    """,
    )
    assert "wrote" not in out, out
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        agent = hierarchy / "release_agent"
        if agent.exists():
            assert agent.read_text().strip() != str(marker)


async def test_the_hosts_root_block_device_cannot_be_made_or_read(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    device = os.stat("/").st_dev
    status, out = as_root(
        box,
        f"""
        mknod /tmp/hostdisk b {os.major(device)} {os.minor(device)} || exit 3
        head -c 512 /tmp/hostdisk > /dev/null && echo READ
    """,
    )
    assert status != 0, out
    assert "READ" not in out


async def test_the_sandbox_cannot_raise_its_own_limits(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    limits = Limits(memory_bytes=256 * MIB, cpus=1, pids=300)
    box = await runtime.boot(new_id(), BootImage((base_template,)), limits)
    _status, out = as_root(
        box,
        """
        for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max \\
                 /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max \\
                 /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max; do
            [ -e "$f" ] && echo -1 > "$f" 2>/dev/null && echo "raised $f"
        done
        exit 0
    """,
    )
    assert "raised" not in out, out
    if runtime.host.pure_v2:
        assert (box.cgroups.unified / "memory.max").read_text().strip() == str(256 * MIB)
    else:
        memory = runtime.host.v1["memory"] / runtime.cgroup_parent / box.id
        assert int((memory / "memory.limit_in_bytes").read_text()) == 256 * MIB


async def test_the_clock_cannot_be_set(runtime: NspawnRuntime, base_template: Path) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    status, out = as_root(box, "date -s '2001-01-01 00:00:00'")
    assert status != 0, out
    assert time.time() > 1_700_000_000  # the host's clock is where it was


async def test_the_hosts_loopback_is_out_of_reach(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        status, out = as_root(
            box, f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
        )
    assert status != 0, out
    assert "refused" in out


async def test_memory_beyond_the_limit_is_oom_killed_inside_and_the_sandbox_lives(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    box = await runtime.boot(
        new_id(), BootImage((base_template,)), Limits(memory_bytes=256 * MIB, pids=1000)
    )
    status, out = as_root(
        box, "python3 -c 'b = bytearray(512 << 20); b[::4096] = b\"x\" * len(b[::4096])'"
    )
    assert status != 0, out
    assert await envd_ready(box.dialer)


async def test_a_write_past_the_disk_size_ends_in_enospc_inside(
    runtime: NspawnRuntime, base_template: Path
) -> None:
    disk_mb = 128
    box = await runtime.boot(new_id(), BootImage((base_template,)), disk_mb=disk_mb)
    status, out = as_root(box, "dd if=/dev/zero of=/root/fill bs=1M count=512 conv=fsync")
    assert status != 0, out
    assert "No space left" in out
    image = SandboxDirs(box.dir).disk_image
    assert image.stat().st_blocks * 512 <= disk_mb * MIB  # what the host gave, at most
    assert await envd_ready(box.dialer)
    # statfs of / inside reports the sandbox's disk, not the host's.
    total_kib = int(as_root(box, "df -k --output=size / | tail -1")[1].split()[-1])
    assert total_kib * 1024 <= disk_mb * MIB


async def test_the_system_call_filter_stays(runtime: NspawnRuntime, base_template: Path) -> None:
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    status = Path(f"/proc/{box.leader_pid}/status").read_text()
    assert "Seccomp:\t2" in status
    # keyctl is one of the calls nspawn's filter refuses a container.
    _, out = as_root(box, "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); "
                          "print(l.syscall(250, 0, 0), ctypes.get_errno())'")  # fmt: skip
    assert out.split()[:2] == ["-1", "1"] or out.split()[1] in ("1", "38"), out


# io_uring_setup(1, params) (system call 425 on x86-64 and arm64): the ring's fd, or -1 and errno.
IO_URING_SETUP = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
print(libc.syscall(425, 1, params), ctypes.get_errno())
"""


async def test_io_uring_is_refused(runtime: NspawnRuntime, base_template: Path) -> None:
    """nspawn's filter allows io_uring; sandboxd's command line takes it out (EPERM)."""
    box = await runtime.boot(new_id(), BootImage((base_template,)))
    code, out = as_root(box, f"python3 -c '{IO_URING_SETUP}'")
    assert (code, out.split()) == (0, ["-1", "1"]), out
