"""The two distributions as users get them: `python -m build` makes each one's sdist and, from
that sdist, its wheel; sandboxd's wheel carries envd's and the base template's recipe, and
installed alone with envd's in a fresh venv, its `sandboxd serve` builds the base template and
serves sandboxes whose envd has none of sandboxd's dependencies beside it."""

from __future__ import annotations

import base64
import functools
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from sandboxd.host.removal import remove_tree
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.sandboxd.template_cache import IMAGE_CACHE

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    for project in (REPO, REPO / "packaging/sandboxd"):
        subprocess.run(
            [sys.executable, "-m", "build", "-q", "--outdir", str(out), str(project)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out


def wheel(dists: Path, name: str) -> Path:
    (found,) = dists.glob(f"{name}-*.whl")
    return found


@pytest.mark.timeout(600)
def test_sandboxds_wheel_carries_envds_and_the_recipe(dists: Path) -> None:
    assert sorted(p.name for p in dists.glob("*.tar.gz")) == [
        "sandbox_envd-0.1.0.tar.gz",
        "sandboxd-0.1.0.tar.gz",
    ]
    with zipfile.ZipFile(wheel(dists, "sandbox_envd")) as envd:
        names = envd.namelist()
        assert not [n for n in names if n.startswith("sandboxd/")]
        metadata = envd.read("sandbox_envd-0.1.0.dist-info/METADATA").decode()
        assert "Requires-Dist: uvicorn==" in metadata
        assert "pydantic" not in metadata
    with zipfile.ZipFile(wheel(dists, "sandboxd")) as sandboxd:
        names = sandboxd.namelist()
        assert "sandboxd/recipe/sandbox_envd-0.1.0-py3-none-any.whl" in names
        for path in (
            "install.sh",
            "add-user",
            "isnotfc.conf",
            "envd.service",
            "sandboxd.service",
            "systemd/sandboxd-node.service",
            "systemd/sandboxd-gateway.service",
        ):
            assert f"sandboxd/recipe/packaging/{path}" in names
        assert not [n for n in names if n.startswith(("envd/", "tree/"))]
        metadata = sandboxd.read("sandboxd-0.1.0.dist-info/METADATA").decode()
        assert "Requires-Dist: sandbox-envd==0.1.0" in metadata
        assert "Requires-Dist: pydantic==" in metadata


@pytest.fixture
def fresh_venv(tmp_path: Path, dists: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [venv / "bin/python", "-m", "pip", "install", "-q",
         wheel(dists, "sandbox_envd"), wheel(dists, "sandboxd")],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    return venv


def run_through_envd(url: str, sandbox_id: str, token: str, script: str) -> str:
    """stdout of `sh -c script`, started by Process/Start through sandboxd's proxy."""
    body = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983",
               "X-Access-Token": token, "Content-Type": "application/connect+json"}  # fmt: skip
    answer = httpx.post(
        url + "/process.Process/Start",
        content=struct.pack(">BI", 0, len(body)) + body,
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    data, stdout = answer.content, b""
    while data:
        _, size = struct.unpack(">BI", data[:5])
        event = json.loads(data[5 : 5 + size]).get("event", {})
        stdout += base64.b64decode(event.get("data", {}).get("stdout", ""))
        data = data[5 + size :]
    return stdout.decode()


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state directory whose debootstrap stage cache is the tests' (scripts/test-image's too)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "cache").symlink_to(IMAGE_CACHE)
    yield state
    (state / "cache").unlink()
    remove_tree(state)


@pytest.mark.root
@pytest.mark.timeout(1200)
def test_a_fresh_venv_with_the_wheels_builds_the_base_and_serves(
    fresh_venv: Path, state_dir: Path
) -> None:
    server = Sandboxd(state_dir, None, NO_NETWORK)
    server.command = [str(fresh_venv / "bin/sandboxd")]
    server.ready_timeout_s = 900  # the base template's first build
    try:
        server.start()
        with server.client() as api:
            created = api.post("/sandboxes", json={"templateID": "base", "secure": True})
            assert created.status_code == 201, created.text
            sandbox = created.json()
        run = functools.partial(
            run_through_envd, server.url, sandbox["sandboxID"], sandbox["envdAccessToken"]
        )
        assert run("echo hello from $(whoami)") == "hello from user\n"
        # The template's envd has its own dependencies and none of sandboxd's.
        probe = "import importlib.util as u; print([m for m in ('sandboxd', 'pydantic', "
        probe += "'httpcore', 'uvicorn') if u.find_spec(m)])"
        assert run(f'/usr/lib/envd/bin/python -I -c "{probe}"') == "['uvicorn']\n"
    finally:
        server.clean_up()
