"""The cluster token's one option, as `sandboxd node` and `sandboxd gateway` both take it: a
gateway given only `--cluster-token-file` reaches the nodes (a create through it runs on one,
which checks the token), and without the file or $SANDBOXD_CLUSTER_TOKEN both commands refuse
to start with the same message; the keys the gateways derive from the token are those they always
derived (a volume's token signed as gateways signed them opens it, an upload URL is signed as
they signed it). tests/cluster/rig.py:
PostgreSQL, one node, one gateway."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
import time
import uuid
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.builds import build_flow
from tests.cluster.gateway import Gateway
from tests.cluster.rig import Cluster, running_cluster

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.timeout(600)
TOKEN_ENV = "SANDBOXD_CLUSTER_TOKEN"  # noqa: S105  # the variable's name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), nodes=1, gateways=1) as running:
        yield running


class FileTokenGateway(Gateway):
    """A gateway given the token by its file only."""

    def __init__(self, name: Path, database_url: str, token_file: Path) -> None:
        super().__init__(name, database_url, token_file.read_text())
        self.env, self.token_file = {}, token_file

    def argv(self) -> list[str]:
        return [*super().argv(), "--cluster-token-file", str(self.token_file)]


def test_a_gateway_given_the_token_file_reaches_the_nodes(cluster: Cluster, tmp_path: Path) -> None:
    token_file = tmp_path / "cluster-token"
    token_file.write_text(cluster.gateways[0].token + "\n")
    gateway = FileTokenGateway(tmp_path / "gateway", cluster.url, token_file)
    try:
        gateway.start()
        with gateway.client() as api:
            made = api.post("/sandboxes", json={"templateID": "base", "timeout": 60})
            assert made.status_code == 201, made.text
            sandbox_id = made.json()["sandboxID"]
            assert sandbox_id in cluster.on_node(cluster.nodes[0])
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    finally:
        gateway.stop()


@pytest.mark.parametrize("role", ["node", "gateway"])
def test_without_a_token_neither_role_starts(cluster: Cluster, role: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    done = subprocess.run([sys.executable, "-m", "sandboxd", role, "--database-url",
                           cluster.url], capture_output=True, text=True, env=env,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode != 0
    assert f"the cluster token is needed: --cluster-token-file or ${TOKEN_ENV}" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "sandboxd", role, "--database-url",
                              cluster.url, "--cluster-token-file", "/nonexistent/token"],
                             capture_output=True, text=True, env=env, check=False,
                             timeout=120)  # fmt: skip
    assert (missing.returncode, "no file at /nonexistent/token" in missing.stderr) == (2, True)


def test_the_volume_key_is_the_one_the_token_always_gave(cluster: Cluster) -> None:
    gateway = cluster.gateways[0]
    key = hmac.new(gateway.token.encode(), b"sandboxd volume tokens", hashlib.sha256).digest()
    with gateway.client() as api:
        made = api.post("/volumes", json={"name": f"keyed-{uuid.uuid4().hex[:8]}"})
    assert made.status_code == 201, made.text
    volume_id, handed = made.json()["volumeID"], made.json()["token"]
    _, expires, signature = handed.split(".")
    assert signature == _signed(key, volume_id, int(expires))
    later = int(time.time()) + 3600
    token = f"{volume_id}.{later}.{_signed(key, volume_id, later)}"
    listed = httpx.get(f"{gateway.url}/volumecontent/{volume_id}/dir", params={"path": "/"},
                       headers={"authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
    assert listed.status_code == 200, listed.text


def test_the_uploads_key_is_the_one_the_token_always_gave(cluster: Cluster) -> None:
    gateway = cluster.gateways[0]
    key = hmac.new(gateway.token.encode(), b"sandboxd build uploads", hashlib.sha256).digest()
    files_hash = hashlib.sha256(b"keyed").hexdigest()
    with gateway.client() as api:
        build = build_flow.request(api, f"keyed-{uuid.uuid4().hex[:6]}")
        offered = api.get(f"/templates/{build.template_id}/files/{files_hash}")
    assert offered.status_code == 201, offered.text
    query = parse_qs(urlsplit(offered.json()["url"]).query)
    [expires], [signature] = query["expires"], query["signature"]
    message = f"upload\n{build.template_id}\n{files_hash}\n{expires}".encode()
    assert signature == hmac.new(key, message, hashlib.sha256).hexdigest()


def _signed(key: bytes, volume_id: str, expires: int) -> str:
    return hmac.new(key, f"{volume_id}.{expires}".encode(), hashlib.sha256).hexdigest()
