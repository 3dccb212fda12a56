"""sandboxd as a systemd service, without systemd as PID 1: the unit `install-service` writes
for each role (packaging/'s, verified by systemd-analyze), and serve as its ExecStart runs it:
READY=1 on NOTIFY_SOCKET only once the API answers, STOPPING=1 and exit 0 on SIGTERM with the
sandboxes left running, and the next start adopting them; journald priority prefixes when
stderr is the journal stream."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from sandboxd.daemon.systemd_unit import INSTALLED
from tests.sandboxd.serving import NO_NETWORK, Sandboxd

pytestmark = pytest.mark.root

CLEAN_EXITS = (0, -signal.SIGTERM)
PACKAGING = Path(__file__).parents[2] / "packaging"


def sandboxd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandboxd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_install_service_writes_a_unit_that_verifies_and_runs_this_sandboxd(tmp_path: Path) -> None:
    done = sandboxd("install-service", "--root", str(tmp_path), "--enable", "--", "--pool", "2")
    assert done.returncode == 0, done.stderr
    units = tmp_path / "etc/systemd/system"
    unit = (units / "sandboxd.service").read_text()
    script = os.path.join(os.path.dirname(sys.executable), "sandboxd")
    assert f"\nExecStart={script} serve --state-dir /var/lib/sandboxd --pool 2\n" in unit
    assert "\nType=notify\n" in unit
    assert "\nKillMode=process\n" in unit
    assert "\nRestart=on-failure\n" in unit
    assert "\nStateDirectory=sandboxd\n" in unit
    assert (units / "multi-user.target.wants/sandboxd.service").is_symlink()
    # A trailing ':' keeps the standard unit directories (network.target and the rest).
    verify = subprocess.run(
        ["systemd-analyze", "verify", "sandboxd.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")


def test_install_service_refuses_a_flag_serve_does_not_take(tmp_path: Path) -> None:
    done = sandboxd("install-service", "--root", str(tmp_path), "--", "--poool", "2")
    assert done.returncode == 2
    assert "--poool" in done.stderr
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize(
    ("role", "flags"),
    [("node", ["--pool", "2", "--node-id", "n 1"]), ("gateway", ["--domain", "e2b.example"])],
)
def test_install_service_writes_each_roles_unit_from_packaging(
    role: str, flags: list[str], tmp_path: Path
) -> None:
    done = sandboxd("install-service", "--role", role, "--root", str(tmp_path), "--enable", "--",
                    *flags)  # fmt: skip
    assert done.returncode == 0, done.stderr
    units = tmp_path / "etc/systemd/system"
    name = f"sandboxd-{role}.service"
    written = (units / name).read_text().splitlines()
    reference = (PACKAGING / "systemd" / name).read_text().splitlines()
    # The reference's every line, its ExecStart running this sandboxd with the flags after.
    start = next(i for i, line in enumerate(reference) if line.startswith("ExecStart="))
    script = os.path.join(os.path.dirname(sys.executable), "sandboxd")
    own = reference[start].removeprefix(f"ExecStart={INSTALLED} ")
    assert written[start] == f"ExecStart={script} {own} {shlex.join(flags)}"
    assert written[:start] + written[start + 1 :] == reference[:start] + reference[start + 1 :]
    assert (units / f"multi-user.target.wants/{name}").is_symlink()
    verify = subprocess.run(["systemd-analyze", "verify", name],
                            env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")


def test_install_service_refuses_a_flag_the_role_does_not_take(tmp_path: Path) -> None:
    done = sandboxd("install-service", "--role", "gateway", "--root", str(tmp_path), "--",
                    "--pool", "2")  # fmt: skip
    assert done.returncode == 2
    assert "--pool" in done.stderr
    assert not (tmp_path / "etc").exists()


class Notifications:
    """A NOTIFY_SOCKET as systemd makes it (a datagram socket); on READY=1, asks the API at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(60)

    def next(self) -> str:
        return self.sock.recv(4096).decode()

    def health_at_ready(self, server: Sandboxd) -> threading.Thread:
        """A thread that waits for READY=1 and then gets /health once, without retrying."""

        def watch() -> None:
            message = self.next()
            assert message.startswith("READY=1\nSTATUS=serving on 127.0.0.1 port "), message
            url = f"http://{message.rsplit(' ', 2)[0].rsplit(' ', 1)[1]}:{message.split()[-1]}"
            self.at_ready = httpx.get(url + "/health", timeout=5).status_code

        self.at_ready = 0
        thread = threading.Thread(target=watch)
        thread.start()
        return thread


def test_serve_under_systemd_notifies_stops_and_is_adopted(
    tmp_path: Path, base_template: Path
) -> None:
    server = Sandboxd(tmp_path / "state", base_template, NO_NETWORK)
    notify = Notifications(tmp_path / "notify")
    server.log.touch()
    log_file = os.stat(server.log)  # stderr is this file: announce it as the journal stream
    server.env = {"NOTIFY_SOCKET": str(notify.path),
                  "JOURNAL_STREAM": f"{log_file.st_dev}:{log_file.st_ino}"}  # fmt: skip
    try:
        ready = notify.health_at_ready(server)
        server.start()
        ready.join(60)
        assert notify.at_ready == 204  # READY=1 came once the API answered
        with server.client() as api:
            created = api.post("/sandboxes", json={"templateID": "base", "timeout": 300})
            assert created.status_code == 201, created.text
            sandbox_id = created.json()["sandboxID"]
        proc = server.proc
        assert proc is not None
        server.stop()  # SIGTERM, as systemctl stop sends it to the main process alone
        # uvicorn re-raises the signal once it has shut down. systemd counts an exit by SIGTERM
        # as clean, as exit 0: Restart=on-failure does not restart a stopped sandboxd.
        assert proc.returncode in CLEAN_EXITS
        assert notify.next() == "STOPPING=1"
        assert server.envd(sandbox_id, "GET", "/health")[0] == 204  # left running
        log = server.log.read_text()
        assert "<6>logger=sandboxd.daemon.serve stopping: sandboxes keep running" in log, log[
            -2000:
        ]
        assert "Waiting for application startup" not in log  # uvicorn's chatter: --verbose only

        server.flags = (NO_NETWORK, "--verbose")
        ready = notify.health_at_ready(server)
        server.start()
        ready.join(60)
        assert notify.at_ready == 204
        with server.client() as api:
            adopted = api.get(f"/sandboxes/{sandbox_id}")
            assert adopted.status_code == 200
            assert adopted.json()["state"] == "running"
        assert "<6>logger=uvicorn.error Waiting for application startup" in server.log.read_text()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(15) in CLEAN_EXITS
        assert notify.next() == "STOPPING=1"
    finally:
        server.clean_up()
        notify.sock.close()
