"""Many create/kill cycles through the control API of a real `sandboxd serve` leave nothing
behind: no mount, cgroup (in any hierarchy), network namespace, process, descriptor in sandboxd,
file in the state directory or row in the store."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.host import uid_ranges
from sandboxd.runtime.nspawn.container import PROPAGATE_DIR
from sandboxd.runtime.spec import RECORD
from tests.sandboxd.inside import loop_devices_of, net_namespaces_held, start_time
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    import httpx

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

CYCLES = 200
AT_ONCE = 3  # creates in flight together: the machine has two cores
WARM_UP = 3  # cycles before the descriptor count is taken (pools, lazy imports)
FD_MARGIN = 4


@dataclass(frozen=True)
class Seen:
    """What one sandbox had on the host while it ran."""

    sandbox_id: str
    processes: frozenset[tuple[int, int | None]]
    netns_inode: int


def cycle(server: Sandboxd, api: httpx.Client) -> Seen:
    """Create, reach envd through the proxy, record the sandbox's traces, kill."""
    created = api.post("/sandboxes", json={"templateID": "base", "timeout": 120})
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    routed = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
    assert api.get("/health", headers=routed).status_code == 204
    netns = server.netns(sandbox_id)
    netns.close()
    pids = server.cgroups(sandbox_id).pids()
    seen = Seen(sandbox_id, frozenset((p, start_time(p)) for p in pids), netns.inode)
    assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    return seen


def fds(pid: int) -> dict[str, str]:
    """fd → what it is, of process `pid`, less the user namespaces sandboxd keeps (one per uid
    range it has used: a cache, not a leak)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed while listing
    return {fd: what for fd, what in found.items() if not what.startswith("user:[")}


def sockets_elsewhere(pid: int) -> list[str]:
    """Sockets process `pid` holds that are not in its own network namespace: after every
    sandbox is gone, each of them pins a dead sandbox's namespace."""
    here: set[str] = set()
    for table in ("tcp", "tcp6", "udp", "udp6", "unix", "raw", "raw6", "netlink", "packet"):
        with contextlib.suppress(FileNotFoundError):
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            column = {"unix": 6, "packet": 8}.get(table, 9)  # the inode's column
            here.update(line.split()[column] for line in lines if len(line.split()) > column)
    return [what for what in fds(pid).values()
            if what.startswith("socket:[") and what[8:-1] not in here]  # fmt: skip


def cgroups_named(names: set[str]) -> list[str]:
    """Every cgroup, in every hierarchy mounted, whose name is one of `names`."""
    with open("/proc/self/mounts") as f:
        tops = {line.split()[1] for line in f if line.split()[2] in ("cgroup", "cgroup2")}
    found = []
    for top in tops:
        for d, subdirs, _ in os.walk(top):
            found += [os.path.join(d, s) for s in subdirs if s in names]
    return found


def processes_of(server: Sandboxd, zombies: bool) -> list[str]:
    """Processes (or only zombies) in the server's cgroups or started on its state directory,
    the server itself aside."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        ours = f"/{server.cgroup_parent}/" in cgroups or str(server.state_dir) in argv
        if ours and int(pid) != server.pid and (state == "Z") == zombies:
            found.append(f"{pid} {state} {argv[:100]} {cgroups.splitlines()[-1]}")
    return found


def traces_left(server: Sandboxd, seen: list[Seen]) -> list[str]:
    ids = {s.sandbox_id for s in seen}
    left = [f"directory {p}" for p in (server.state_dir / "sandboxes").iterdir()]
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    left += [f"mount {m}" for m in mountinfo if str(server.state_dir) in m]
    left += [f"mount {m}" for m in mountinfo if any(i in m for i in ids)]
    left += [f"cgroup {c}" for c in cgroups_named(ids)]
    left += [f"propagate dir {i}" for i in ids if (PROPAGATE_DIR / i).exists()]
    left += [f"process {p}" for p in processes_of(server, zombies=False)]
    recorded = {process for s in seen for process in s.processes}
    left += [f"process {p}" for p, t in recorded if t is not None and start_time(p) == t]
    held = net_namespaces_held({p for p, t in recorded if start_time(p) == t})
    left += [f"network namespace {s.netns_inode} of {s.sandbox_id}"
             for s in seen if s.netns_inode in held]  # fmt: skip
    sandboxes = server.state_dir / "sandboxes"
    left += [f"uid range {base} of {i}" for i in ids
             for base in uid_ranges.claimed_by(sandboxes / i / RECORD)]  # fmt: skip
    left += [f"loop device {d}" for d in loop_devices_of(sandboxes)]
    return left


@pytest.mark.timeout(1200)
def test_create_kill_cycles_through_the_api_leave_nothing(
    tmp_path: Path, base_template: Path
) -> None:
    with (
        running_sandboxd(tmp_path / "state", base_template, NO_NETWORK) as server,
        server.client() as api,
    ):
        pid = server.pid
        for _ in range(WARM_UP):
            cycle(server, api)
        state_before = sorted(p.name for p in server.state_dir.iterdir())
        fds_before = fds(pid)
        with ThreadPoolExecutor(AT_ONCE) as pool:
            seen = list(pool.map(lambda _: cycle(server, api), range(CYCLES)))

        assert api.get("/sandboxes").json() == []
        assert api.get("/v2/sandboxes").json() == []
        with sqlite3.connect(server.state_dir / "sandboxd.db") as db:
            assert db.execute("SELECT sandbox_id FROM sandboxes").fetchall() == []
        assert traces_left(server, seen) == []
        # An nspawn that was killed stays a zombie until PID 1 reaps it (the init of some
        # machines does so only every second or two): not sandboxd's to reap.
        wait_until(lambda: not processes_of(server, zombies=True), 30, "PID 1 to reap zombies")
        fds_after = fds(pid)
        assert [fd for fd in fds_after.values() if fd.startswith("net:")] == []
        assert sockets_elsewhere(pid) == []
        grown = {fd: what for fd, what in fds_after.items() if fds_before.get(fd) != what}
        assert len(fds_after) - len(fds_before) <= FD_MARGIN, grown
        assert sorted(p.name for p in server.state_dir.iterdir()) == state_before
