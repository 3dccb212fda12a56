"""A private Jupyter Server for the peer benchmarks (bench.peers): installed from PyPI into a
throwaway virtualenv (or one given with --jupyter-venv, kept for the next run), on a loopback
port with token auth, its HOME and every Jupyter directory inside a temp dir, run by pid and
stopped afterwards."""

from __future__ import annotations

import base64
import secrets
import subprocess
import sys
from pathlib import Path

import httpx

from bench.peer_procs import ServerProcess, wait_for_port
from tests.envd_process import DIE_WITH_PARENT, free_port

JUPYTER_SERVER = "jupyter-server==2.21.1"


def ensure_venv(venv: Path) -> Path:
    """The virtualenv's jupyter-server executable, installing it first when missing."""
    executable = venv / "bin" / "jupyter-server"
    if not executable.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", JUPYTER_SERVER],
            check=True,
        )
    return executable


class JupyterServer(ServerProcess):
    """jupyter-server serving `root_dir`; `upload` PUTs a file through the contents API."""

    def __init__(self, venv: Path, directory: Path, root_dir: Path) -> None:
        executable = ensure_venv(venv)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root_dir = root_dir
        self._token = secrets.token_hex(16)
        home = directory / "home"
        home.mkdir()
        env = {
            "PATH": f"{venv}/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(home),
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        }
        log_path = directory / "jupyter.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    *DIE_WITH_PARENT,
                    str(executable),
                    "--ServerApp.ip=127.0.0.1",
                    f"--ServerApp.port={self.port}",
                    "--ServerApp.port_retries=0",
                    f"--IdentityProvider.token={self._token}",
                    f"--ServerApp.root_dir={root_dir}",
                    "--ServerApp.open_browser=False",
                    "--ServerApp.allow_root=True",
                    "--ServerApp.log_level=WARN",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        super().__init__("jupyter-server", proc)
        try:
            wait_for_port(self.port, proc, log_path)
        except BaseException:
            self.stop()
            raise
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"token {self._token}"}, timeout=600
        )

    def upload(self, name: str, data: bytes, chunk_size: int | None = None) -> None:
        """PUT /api/contents/NAME as base64, whole or in chunks as JupyterLab's uploader does
        for large files (chunk 1, 2, ... and -1 for the last)."""
        if chunk_size is None:
            self._put(name, data, None)
            return
        pieces = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
        for number, piece in enumerate(pieces, 1):
            self._put(name, piece, -1 if number == len(pieces) else number)

    def _put(self, name: str, data: bytes, chunk: int | None) -> None:
        model: dict[str, object] = {
            "type": "file",
            "format": "base64",
            "name": name,
            "path": name,
            "content": base64.b64encode(data).decode(),
        }
        if chunk is not None:
            model["chunk"] = chunk
        self.client.put(f"/api/contents/{name}", json=model).raise_for_status()

    def stop(self) -> None:
        if hasattr(self, "client"):
            self.client.close()
        super().stop()


def venv_home(requested: str | None, scratch: Path) -> Path:
    """The given virtualenv (kept), or a throwaway one under the run's scratch dir."""
    return Path(requested).resolve() if requested else scratch / "jupyter-venv"
