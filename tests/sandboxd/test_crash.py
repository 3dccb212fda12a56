"""After a crash nothing paused is lost: serve and every process of its sandboxes SIGKILLed (by
pid), then what a reboot takes with them (their mounts, loop devices and cgroups, nspawn's
directory in /run), and serve started again on the same state. Every paused sandbox, frozen or
on disk, is listed and resumes with its files and its token; and so does a sandbox that was
running (beyond E2B: it comes back paused to disk). A full pause that lost its processes is
reported paused to disk, and its resume is a boot (a new boot id). One of them is connected and
read through the unmodified Python SDK (tests/sdk/.venv). And a frozen sandbox whose processes
were killed while serve ran resumes by a boot from its files too."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from typing import TYPE_CHECKING

import pytest

from sandboxd.host import libc, loop
from sandboxd.host.cgroups import CgroupHost, existing_sandboxes
from sandboxd.host.removal import mounts_under, remove_tree
from sandboxd.runtime.nspawn.container import PROPAGATE_DIR
from tests.network import sdk_suites
from tests.sandboxd.guest_shell import sh
from tests.sandboxd.serving import API_KEY, NO_NETWORK, running_sandboxd
from tests.sandboxd.test_disk_pause import BOOT_ID, FS, SLEEPERS, prepared
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.host.cgroups import SandboxCgroups
    from tests.sandboxd.serving import Sandboxd

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: sandboxes and their mounts"),
]

MARKER = "/home/user/marker"  # as test_disk_pause.prepared writes it
READ_WITH_SDK = (
    "import sys\n"
    "from e2b import Sandbox\n"
    "print(Sandbox.connect(sys.argv[1], timeout=60).files.read(sys.argv[2]), end='')\n"
)


@pytest.fixture(scope="module")
def sdk_env() -> None:
    """The SDK's virtualenv made or refreshed (scripts/sdk-env)."""
    sdk_suites.node_path()


@pytest.mark.timeout(300)  # three sandboxes created, a restart, three boots and the SDK's start
def test_after_a_crash_every_paused_and_running_sandbox_resumes_with_its_files(
    tmp_path: Path, base_template: Path, sdk_env: None
) -> None:
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK) as server:
        with server.client() as api:
            made = {kind: prepared(server, api, kind) for kind in ("full", "filesystem", "running")}
            ids = {kind: sid for kind, (sid, _) in made.items()}
            tokens = {kind: token for kind, (_, token) in made.items()}
            boots = {kind: sh(server, sid, BOOT_ID, tokens[kind]) for kind, sid in ids.items()}
            assert api.post(f"/sandboxes/{ids['full']}/pause").status_code == 204
            pause_fs = api.post(f"/sandboxes/{ids['filesystem']}/pause", json=FS)
            assert pause_fs.status_code == 204
        crash(server)
        for sid in ids.values():
            assert [t for t in server.traces(sid) if not t.startswith(("directory", "uid"))] == []
        server.start()
        with server.client() as api:
            listed = {s["sandboxID"]: s for s in api.get("/v2/sandboxes?state=paused").json()}
            assert sorted(listed) == sorted(ids.values())
            assert {s["pauseMode"] for s in listed.values()} == {"filesystem"}
            assert read_with_sdk(server, ids["running"]) == "running\n"
            for kind in ("full", "filesystem"):
                sid = ids[kind]
                resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
                assert resumed.status_code == 201, resumed.text
                assert resumed.json()["envdAccessToken"] == tokens[kind]
            for kind, sid in ids.items():
                assert api.get(f"/sandboxes/{sid}").json()["state"] == "running"
                assert sh(server, sid, f"cat {MARKER}", tokens[kind]) == f"{kind}\n"
                assert sh(server, sid, BOOT_ID, tokens[kind]) != boots[kind]
                assert sh(server, sid, SLEEPERS, tokens[kind]).strip() == ""
                assert api.delete(f"/sandboxes/{sid}").status_code == 204
                assert server.traces(sid) == []
    layers = tmp_path / "state" / "layers"
    assert [p.name for p in layers.iterdir() if p.name.startswith("pause-")] == []


def test_a_frozen_sandbox_whose_processes_were_killed_resumes_from_its_files(
    tmp_path: Path, base_template: Path
) -> None:
    state = tmp_path / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as server, server.client() as api:
        sid, token = prepared(server, api, "frozen")
        boot = sh(server, sid, BOOT_ID, token)
        assert api.post(f"/sandboxes/{sid}/pause").status_code == 204
        wait_until(functools.partial(killed, server.cgroups(sid)), 30, "its processes to die")
        resumed = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        assert resumed.json()["envdAccessToken"] == token
        assert sh(server, sid, f"cat {MARKER}", token) == "frozen\n"
        assert sh(server, sid, BOOT_ID, token) != boot
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        assert server.traces(sid) == []


def crash(server: Sandboxd) -> None:
    """SIGKILL serve and every process of its sandboxes by pid, then remove what a reboot
    would: the sandboxes' mounts, loop devices, cgroups and nspawn's directories in /run."""
    os.kill(server.pid, signal.SIGKILL)
    assert server.proc is not None
    server.proc.wait()
    server.proc = None
    boxes = server.state_dir / "sandboxes"
    sandbox_ids = existing_sandboxes(CgroupHost.detect(), server.cgroup_parent)
    for sid in sandbox_ids:
        all_killed = functools.partial(killed, server.cgroups(sid))
        wait_until(all_killed, 30, f"sandbox {sid}'s processes to die")
    for point in sorted(mounts_under(boxes), key=len, reverse=True):
        libc.umount(point, libc.MNT_DETACH)
    images = list(boxes.glob("*/disk.img"))
    wait_until(lambda: detached(images), 30, "the sandboxes' loop devices to go")
    for sid in sandbox_ids:
        server.cgroups(sid).remove()
        remove_tree(PROPAGATE_DIR / sid)


def killed(cgroups: SandboxCgroups) -> bool:
    """SIGKILL each process of a sandbox; whether there was none left to kill."""
    pids = cgroups.pids()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return not pids


def detached(images: list[Path]) -> bool:
    """Detach the loop devices backed by `images` (autoclear frees one only once its lazily
    unmounted filesystem is released); whether none was left."""
    devices = [device for image in images for device in loop.backed_by(image)]
    for device in devices:
        with contextlib.suppress(OSError):
            loop.detach(device)
    return not devices


def read_with_sdk(server: Sandboxd, sandbox_id: str) -> str:
    """The marker of `sandbox_id`, connected to (resumed) and read by the Python SDK."""
    python = sdk_suites.SDK / ".venv" / "bin" / "python"
    env = sdk_suites.suite_env(server.url, API_KEY, "/usr/bin:/bin")
    done = subprocess.run(
        [str(python), "-c", READ_WITH_SDK, sandbox_id, MARKER],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
