"""serve with `--registry` against a real registry (docker-registry on loopback): a build, a
snapshot and a pause to disk push their layers before they are done; a create or a resume
whose layers this machine lacks (they were made elsewhere: here, removed from the layer store)
pulls them first. A registry that is down is a 503 naming it, with nothing half-made left in the
layer store and the sandbox as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from sandboxd.daemon.registry_options import PASSWORD_ENV
from sandboxd.images.layer_registry import LayerRegistry
from tests.builds.build_flow import request, start
from tests.cluster.registry_server import registry_server, registry_url
from tests.sandboxd.guest_shell import sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from tests.images.registry import Registry
    from tests.sandboxd.serving import Sandboxd

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]

FS = {"memory": False}


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with registry_server() as running:
        yield running


@pytest.fixture(scope="module")
def server(
    registry: Registry, tmp_path_factory: pytest.TempPathFactory, base_template: Path
) -> Iterator[Sandboxd]:
    flags = (NO_NETWORK, "--pool", "0", "--registry", registry_url(registry, "serve/layers"))
    with running_sandboxd(tmp_path_factory.mktemp("registry"), base_template, *flags) as s:
        yield s


@pytest.fixture
def remote(registry: Registry) -> Iterator[LayerRegistry]:
    """The layers' repository, as another machine sees it."""
    connected = LayerRegistry(registry_url(registry, "serve/layers"))
    yield connected
    connected.close()


def create(api: httpx.Client, template: str = "base") -> tuple[str, str]:
    answer = api.post("/sandboxes", json={"templateID": template, "secure": True, "timeout": 300})
    assert answer.status_code == 201, answer.text
    return answer.json()["sandboxID"], answer.json()["envdAccessToken"]


def built(api: httpx.Client, recipe: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The template a build of `recipe` made, and the build's final status."""
    build = request(api, f"registry-{uuid.uuid4().hex[:8]}")
    assert start(api, build, recipe).status_code == 202
    path = f"/templates/{build.template_id}/builds/{build.build_id}/status"

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = api.get(path).json()
        return body if body["status"] not in ("waiting", "building") else None

    return build.template_id, wait_until(ended, 600, "the build to end")


def local_layers(server: Sandboxd, prefix: str) -> list[Path]:
    return sorted((server.state_dir / "layers").glob(f"{prefix}*"))


def leftovers(server: Sandboxd) -> list[str]:
    layers = server.state_dir / "layers"
    return [p.name for p in layers.iterdir() if p.name.startswith((".pull-", ".new-"))]


def test_a_built_template_boots_from_layers_pulled_back(
    server: Sandboxd, remote: LayerRegistry
) -> None:
    step = "echo built-here > /etc/built && ln -s /etc/shadow /etc/built-link"
    recipe = {"fromTemplate": "base", "force": True,
              "steps": [{"type": "RUN", "args": [step, "root"], "force": True}]}  # fmt: skip
    with server.client() as api:
        template_id, status = built(api, recipe)
        assert status["status"] == "ready", status
        steps = local_layers(server, "step-")
        assert steps
        assert all(remote.has(p.name) for p in steps)
        for layer in steps:  # as on a machine that never built it
            shutil.rmtree(layer)
        sid, token = create(api, template_id)
        assert [p.name for p in local_layers(server, "step-")] == [p.name for p in steps]
        assert sh(server, sid, "cat /etc/built; readlink /etc/built-link", token) == (
            "built-here\n/etc/shadow\n"
        )
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
    assert leftovers(server) == []


def test_a_snapshot_and_a_pause_to_disk_are_pushed_and_pulled_back(
    server: Sandboxd, remote: LayerRegistry
) -> None:
    with server.client() as api:
        sid, token = create(api)
        wrote = "echo kept > /home/user/marker && mkfifo /home/user/pipe && rm /etc/debian_version"
        sh(server, sid, wrote, token)
        answer = api.post(f"/sandboxes/{sid}/snapshots", json={})
        assert answer.status_code == 201, answer.text
        [snapshot_layer] = local_layers(server, "snapshot-")
        assert remote.has(snapshot_layer.name)

        assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
        [pause_layer] = local_layers(server, f"pause-{sid}-")
        assert remote.has(pause_layer.name)
        shutil.rmtree(pause_layer)
        shutil.rmtree(snapshot_layer)

        resumed = api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        kept = "cat /home/user/marker; stat -c %F /home/user/pipe; ls /etc/debian_version || true"
        assert sh(server, sid, kept, token) == "kept\nfifo\n"  # the removal (a whiteout) too
        child, child_token = create(api, str(answer.json()["snapshotID"]))
        assert sh(server, child, "cat /home/user/marker", child_token) == "kept\n"
        for done in (sid, child):
            assert api.delete(f"/sandboxes/{done}").status_code == 204
    assert leftovers(server) == []


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--registry", "http://registry.example:5000"], {}, "plain http only to 127.0.0.1"),
        (["--registry", "ftp://127.0.0.1/x"], {}, "give http(s)://HOST"),
        (["--registry", "https://r.example", "--registry-user", "u"], {}, PASSWORD_ENV),
        (["--registry-user", "u"], {PASSWORD_ENV: "p"}, "--registry-user needs --registry"),
    ],
)
def test_registry_options_are_checked_before_anything(
    tmp_path: Path, flags: list[str], env: dict[str, str], message: str
) -> None:
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "sandboxd", "serve", "--state-dir", str(state), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ | env, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not state.exists()


def test_a_registry_that_is_down_is_a_503_and_leaves_nothing(
    tmp_path: Path, base_template: Path
) -> None:
    with registry_server() as gone:
        flags = (NO_NETWORK, "--pool", "0", "--registry", registry_url(gone))
        with running_sandboxd(tmp_path / "state", base_template, *flags) as server, \
                server.client() as api:  # fmt: skip
            sid, token = create(api)
            sh(server, sid, "echo mine > /home/user/marker", token)
            taken = api.post(f"/sandboxes/{sid}/snapshots", json={})
            assert taken.status_code == 201, taken.text
            [layer] = local_layers(server, "snapshot-")
            shutil.rmtree(layer)
            gone.stop()

            refused = api.post("/sandboxes", json={"templateID": taken.json()["snapshotID"]})
            assert refused.status_code == 503, refused.text
            assert "cannot be reached" in refused.json()["message"], refused.text
            assert local_layers(server, "snapshot-") == []

            paused = api.post(f"/sandboxes/{sid}/pause", json=FS)
            assert paused.status_code == 503, paused.text
            assert gone.host in paused.json()["message"], paused.text
            assert local_layers(server, f"pause-{sid}-") == []
            assert api.get(f"/sandboxes/{sid}").json()["state"] == "running"
            assert sh(server, sid, "cat /home/user/marker", token) == "mine\n"

            again = api.post(f"/sandboxes/{sid}/snapshots", json={})
            assert again.status_code == 503, again.text
            assert local_layers(server, "snapshot-") == []
            assert leftovers(server) == []
            assert api.delete(f"/sandboxes/{sid}").status_code == 204
