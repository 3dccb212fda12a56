"""A real `sandboxd serve` for tests: a subprocess on a free loopback port with its own state
directory and cgroup parent, the cached base template as its base, and a known API key. Stopping
it kills every sandbox it left and checks that its log has no traceback.

serve networks its sandboxes by default (forwarding and a masquerade in its namespace): here it
must be given `--no-network`, unless it runs inside the fake internet (tests/network/served.py),
where the only outside is a fake one (docs/testing.md, "Network tests")."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from sandboxd.guest.client import EnvdClient
from sandboxd.guest.commands import POSIX_SH, Command, run
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.host import uid_ranges
from sandboxd.host.cgroups import CgroupHost, SandboxCgroups
from sandboxd.host.netns import NetNamespace
from sandboxd.host.removal import remove_tree
from sandboxd.runtime.nspawn import container
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import RECORD
from sandboxd.volumes.storage import VolumeStorage
from tests.sandboxd.inside import loop_devices_of
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

API_KEY = "e2b_" + "5a" * 20
NO_NETWORK = "--no-network"


class NetworkedOutsideFakeInternet(RuntimeError):
    """A test asked for a serve whose sandboxes would reach the machine's real network."""


def kill_sandboxes(state_dir: Path, cgroup_parent: str) -> None:
    """Kill every sandbox a stopped sandboxd left in `state_dir` (SIGTERM leaves them running)
    and remove its cgroup parent."""

    async def kill_all() -> None:
        runtime = NspawnRuntime(
            state_dir / "sandboxes",
            cgroup_parent=cgroup_parent,
            probe=envd_ready,
            guest_unit=ENVD_UNIT,
        )
        for box in runtime.adopt():
            await runtime.kill(box)

    asyncio.run(kill_all())
    host = CgroupHost.detect()
    for mount in {host.unified, *host.v1.values()}:
        with contextlib.suppress(FileNotFoundError):
            (mount / cgroup_parent).rmdir()


def release_volumes(state_dir: Path) -> None:
    """Unmount and remove the volumes a stopped sandboxd left mounted (they outlive its stop)."""
    storage = VolumeStorage(state_dir / "volumes")
    storage.ensure_mounted(())  # none wanted: each is removed, its loop device freed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Sandboxd:
    """One state directory served by (successive) `sandboxd serve` processes. `flags` must
    include `--no-network` (NO_NETWORK): `start` refuses otherwise."""

    # Whether serve runs where its sandboxes' way out reaches only what the test made.
    in_fake_internet = False

    def __init__(self, state_dir: Path, base_rootfs: Path | None, *flags: str) -> None:
        self.state_dir = state_dir
        self.base_rootfs = base_rootfs  # None: serve builds its own
        self.flags = flags
        # How serve is run, with what in its environment, and how long it may take to answer.
        self.command = [sys.executable, "-m", "sandboxd"]
        self.env: dict[str, str] = {}
        self.ready_timeout_s = 60.0
        self.cgroup_parent = f"sandboxd-test-{os.getpid()}-{state_dir.name}"
        self.log = state_dir.parent / f"{state_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        """Raises NetworkedOutsideFakeInternet for a networked serve outside the fake internet."""
        if NO_NETWORK not in self.flags and not self.in_fake_internet:
            raise NetworkedOutsideFakeInternet(
                f"sandboxd serve {' '.join(self.flags)}: without {NO_NETWORK} its sandboxes would "
                "reach this machine's real network; network tests run it in the fake internet"
            )
        env = {**os.environ, "SANDBOXD_API_KEY": API_KEY, **self.env}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, env=env)
        wait_until(self._ready, self.ready_timeout_s, "sandboxd to serve")

    def argv(self) -> list[str]:
        """The command line of the next start, on a free port (`url`)."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        base = [] if self.base_rootfs is None else ["--base-rootfs", str(self.base_rootfs)]
        return [*self.command, "serve", "--port", str(port), "--state-dir", str(self.state_dir),
                *base, "--cgroup-parent", self.cgroup_parent, *self.flags]  # fmt: skip

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"sandboxd exited: {self.log.read_text()[-2000:]}"
        try:
            return httpx.get(self.url + "/templates", headers=self.headers, timeout=1).is_success
        except httpx.TransportError:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not serving"
        return self.proc.pid

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": API_KEY}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)

    def stop(self) -> None:
        """SIGTERM, as an operator stops it: sandboxes keep running."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc = None
        assert "Traceback" not in self.log.read_text(), self.log.read_text()[-3000:]

    def clean_up(self) -> None:
        """Stop the server and remove every sandbox and cgroup it made."""
        try:
            self.stop()
        finally:
            kill_sandboxes(self.state_dir, self.cgroup_parent)
            release_volumes(self.state_dir)

    def cgroups(self, sandbox_id: str) -> SandboxCgroups:
        return SandboxCgroups(CgroupHost.detect(), self.cgroup_parent, sandbox_id)

    def box_dir(self, sandbox_id: str) -> Path:
        return self.state_dir / "sandboxes" / sandbox_id

    def netns(self, sandbox_id: str) -> NetNamespace:
        """The sandbox's network namespace, found as the server finds it (the proxy is not
        part of these tests)."""
        supervisor = container.supervisor(self.cgroups(sandbox_id))
        leader = container.leader(supervisor) if supervisor else None
        if leader is None:
            raise LookupError(f"sandbox {sandbox_id} has no container (yet)")
        return NetNamespace(leader)

    def envd(
        self,
        sandbox_id: str,
        method: str,
        path: str,
        token: str | None = None,
        timeout_s: float = 2,
    ) -> tuple[int, Any]:
        """(status, body) of a request to envd inside the sandbox; (0, None) without answer."""

        async def ask() -> tuple[int, Any]:
            try:
                netns = self.netns(sandbox_id)
            except LookupError:
                return 0, None
            client = EnvdClient()
            client.reach(sandbox_id, netns)
            try:
                return await client.request(
                    sandbox_id, method, path, token=token, timeout_s=timeout_s
                )
            except Exception:  # noqa: BLE001  # unreachable, whatever the reason
                return 0, None
            finally:
                await client.aclose()
                netns.close()

        return asyncio.run(ask())

    def sh(self, sandbox_id: str, script: str, token: str | None, user: str = "root") -> str:
        """`script` run by envd inside the sandbox as `user`; its stdout (it must exit 0)."""

        async def ask() -> str:
            netns = self.netns(sandbox_id)
            client = EnvdClient()
            client.reach(sandbox_id, netns)
            out: list[bytes] = []
            try:
                code = await run(client, sandbox_id, Command(script, POSIX_SH, user=user),
                                 token=token, on_output=lambda kind, data: out.append(data)
                                 if kind == "stdout" else None)  # fmt: skip
            finally:
                await client.aclose()
                netns.close()
            assert code == 0, f"{script!r} as {user} exited {code}"
            return b"".join(out).decode()

        return asyncio.run(ask())

    @contextlib.contextmanager
    def held_until_resumed(self, sandbox_id: str) -> Iterator[None]:
        """For a paused sandbox: a /health request to its envd that gets no answer while the
        block starts (half a second) and gets 204 once the block has resumed the sandbox. Frozen,
        not gone: a dead envd fails the request at once or never answers it."""
        with ThreadPoolExecutor(1) as background:
            health = background.submit(self.envd, sandbox_id, "GET", "/health", None, 30)
            answered, _ = wait([health], timeout=0.5)
            assert not answered, (
                f"envd did not hold the request: {health.result()} (0: unreachable)"
            )
            yield
            assert health.result()[0] == 204, "the request held while paused got no answer"

    def traces(self, sandbox_id: str) -> list[str]:
        """What of the sandbox is still on the host."""
        left = []
        if self.box_dir(sandbox_id).exists():
            left.append(f"directory {self.box_dir(sandbox_id)}")
        cgroups = self.cgroups(sandbox_id)
        left += [f"cgroup {d}" for d in cgroups.dirs if d.exists()]
        mounts = Path("/proc/self/mountinfo").read_text()
        if str(self.box_dir(sandbox_id)) in mounts:
            left.append("a mount")
        left += [f"uid range {b}" for b in uid_ranges.claimed_by(self.box_dir(sandbox_id) / RECORD)]
        left += [f"loop device {d}" for d in loop_devices_of(self.box_dir(sandbox_id))]
        return left


@contextlib.contextmanager
def running_sandboxd(state_dir: Path, base_rootfs: Path, *flags: str) -> Iterator[Sandboxd]:
    server = Sandboxd(state_dir, base_rootfs, *flags)
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


def wait_gone(client: httpx.Client, sandbox_id: str, timeout_s: float) -> None:
    wait_until(
        lambda: client.get(f"/sandboxes/{sandbox_id}").status_code == 404,
        timeout_s,
        f"sandbox {sandbox_id} to be gone",
    )


def main(argv: list[str]) -> None:
    """For scripts: `free-port` prints a free loopback port; `clean-up STATE_DIR CGROUP_PARENT`
    kills what a stopped sandboxd left and removes the state directory."""
    if argv[:1] == ["free-port"]:
        print(free_port())  # noqa: T201  # the script reads it from stdout
    elif argv[:1] == ["clean-up"] and len(argv) == 3:
        state_dir = Path(argv[1])
        kill_sandboxes(state_dir, argv[2])
        release_volumes(state_dir)
        remove_tree(state_dir)
    else:
        sys.exit("usage: python -m tests.sandboxd.serving free-port | clean-up STATE_DIR CGROUP")


if __name__ == "__main__":
    main(sys.argv[1:])
