"""packaging/install.sh on this machine, into a temporary prefix, bin and unit directory: the
installed envd runs isolated from the Python environment around it, tells systemd READY=1 only
once it listens, and a second install is a clean upgrade in place."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from connectrpc.codec import proto_json_codec

from envd._gen.process.process_connect import ProcessClientSync
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from envd.settings import ENVD_VERSION
from tests.envd_process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "packaging" / "install.sh"
COMMIT = "abc1234"

pytestmark = pytest.mark.root


class Installed:
    def __init__(self, base: Path) -> None:
        self.prefix = base / "prefix"
        self.bin_dir = base / "bin"
        self.unit_dir = base / "units"
        self.launcher = self.bin_dir / "envd"

    def install(self) -> None:
        subprocess.run(
            [
                str(INSTALL),
                "--prefix",
                str(self.prefix),
                "--bin-dir",
                str(self.bin_dir),
                "--unit-dir",
                str(self.unit_dir),
                "--commit",
                COMMIT,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )

    def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [str(self.launcher), *args], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    target = Installed(tmp_path_factory.mktemp("install"))
    target.install()
    return target


@pytest.fixture
def poisoned_python(tmp_path: Path) -> dict[str, str]:
    """An environment whose PYTHONPATH, PYTHONHOME and user site each hold a broken `envd`
    and `uvicorn`, as a template's own pip installs or a user's shell could."""
    for where in ("pythonpath", "home/.local/lib/python3.11/site-packages"):
        for module in ("envd", "uvicorn"):
            package = tmp_path / where / module
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("raise SystemExit('wrong module imported')\n")
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(tmp_path / "pythonpath"),
        "PYTHONHOME": str(tmp_path / "nowhere"),
        "PYTHONSTARTUP": str(tmp_path / "nowhere.py"),
    }


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        sock.settimeout(30)
        yield address, sock


def test_version_and_commit_ignore_the_surrounding_python(
    installed: Installed, poisoned_python: dict[str, str]
) -> None:
    assert installed.run("-version", env=poisoned_python) == ENVD_VERSION
    assert installed.run("-commit", env=poisoned_python) == COMMIT


def test_ready_only_once_listening_and_children_see_nothing_of_the_prefix(
    installed: Installed, poisoned_python: dict[str, str], notify_socket: tuple[str, socket.socket]
) -> None:
    address, sock = notify_socket
    port = free_port()
    env = {**poisoned_python, "NOTIFY_SOCKET": address}
    proc = subprocess.Popen(
        [str(installed.launcher), "-port", str(port), "-bind", "127.0.0.1", "-isnotfc"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        message = sock.recv(4096).decode()
        assert "READY=1" in message.split("\n")
        # READY=1 came first, yet the port already answers: no retry loop needed.
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 204
        # The launcher execs the interpreter: the PID systemd watches is envd itself.
        exe = Path(os.readlink(f"/proc/{proc.pid}/exe"))
        assert exe.resolve() == (installed.prefix / "bin" / "python").resolve()
        out = _start(port, "env")
        assert str(installed.prefix) not in out
        assert "NOTIFY_SOCKET" not in out
        assert "PYTHON" not in out
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert b"Traceback" not in stderr


def test_second_install_upgrades_in_place(installed: Installed) -> None:
    launcher_before = installed.launcher.read_text()
    installed.install()
    assert installed.launcher.read_text() == launcher_before
    assert installed.run("-version") == ENVD_VERSION
    unit = (installed.unit_dir / "envd.service").read_text()
    assert unit == (REPO / "packaging" / "envd.service").read_text()
    # Byte-compiled at install time: the first start does not compile envd's modules.
    site = next((installed.prefix / "lib").glob("python3.*/site-packages"))
    compiled = {p.name.split(".")[0] for p in (site / "envd" / "__pycache__").glob("*.pyc")}
    assert {p.stem for p in (site / "envd").glob("*.py")} <= compiled
    # Not an editable install: nothing in the prefix points back at this source tree.
    assert not list(site.glob("__editable__*"))
    assert not any(str(REPO) in p.read_text() for p in site.glob("*.pth"))


def _start(port: int, cmd: str) -> str:
    """Process/Start over Connect JSON: what the child prints."""
    out = bytearray()
    url = f"http://127.0.0.1:{port}"
    with ProcessClientSync(url, codec=proto_json_codec(), send_compression=None) as client:
        for response in client.start(StartRequest(process=ProcessConfig(cmd=cmd))):
            event = response.event.event if response.event else None
            if event is not None and event.field == "data" and event.value.output:
                out += event.value.output.value
    return out.decode()
