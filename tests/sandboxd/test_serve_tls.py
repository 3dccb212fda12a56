"""E2B's domain mode on loopback: `sandboxd tls init` makes a CA and a certificate for
`api.DOMAIN` and `*.DOMAIN`, and serve given them answers HTTPS on its one port, the control API
at `api.DOMAIN` and the proxy at `{port}-{sandboxID}.DOMAIN` (each asked for by SNI and Host, as
a client that resolved the name to 127.0.0.1 does), and tells the SDKs that domain with each
sandbox. A sandbox host under another domain is
answered 400 naming serve's, not the control API's 401. The SDKs over resolved names:
tests/network/test_sdk_domain.py."""

from __future__ import annotations

import ssl
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.sandboxd.serving import NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.root

DOMAIN = "sandboxes.test"


def tls_init(state_dir: Path, domain: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sandboxd", "tls", "init", "--state-dir", str(state_dir),
            "--domain", domain]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, check=False)


class TlsSandboxd(Sandboxd):
    """serve over HTTPS with `tls init`'s certificate, asked for by name on 127.0.0.1."""

    def __init__(self, state_dir: Path, base_rootfs: Path) -> None:
        tls = state_dir / "tls"
        super().__init__(state_dir, base_rootfs, NO_NETWORK, "--domain", DOMAIN,
                         "--tls-cert", str(tls / "cert.pem"), "--tls-key", str(tls / "key.pem"))  # fmt: skip
        self.trust = ssl.create_default_context(cafile=tls / "ca.pem")

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"sandboxd exited: {self.log.read_text()[-2000:]}"
        try:
            return self.request("GET", f"api.{DOMAIN}", "/templates", timeout=1).is_success
        except httpx.TransportError:
            return False

    def request(self, method: str, name: str, path: str, *, key: bool = True,
                **kwargs: Any) -> httpx.Response:  # fmt: skip
        """`method https://NAME/path`, NAME resolved to serve's 127.0.0.1 and port (with the API
        key unless not `key`)."""
        port = self.url.rpartition(":")[2]
        headers = {"Host": name, **(self.headers if key else {}), **kwargs.pop("headers", {})}
        with httpx.Client(verify=self.trust, timeout=kwargs.pop("timeout", 60)) as client:
            return client.request(method, f"https://127.0.0.1:{port}{path}", headers=headers,
                                  extensions={"sni_hostname": name}, **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[TlsSandboxd]:
    state_dir = tmp_path_factory.mktemp("serve-tls") / "state"
    made = tls_init(state_dir, DOMAIN)
    assert made.returncode == 0, made.stderr
    s = TlsSandboxd(state_dir, base_template)
    try:
        s.start()
        yield s
    finally:
        s.clean_up()


def test_tls_init_keeps_its_ca_and_keys_private(tmp_path: Path) -> None:
    made = tls_init(tmp_path, DOMAIN)
    assert made.returncode == 0, made.stderr
    tls = tmp_path / "tls"
    assert f"--tls-cert {tls / 'cert.pem'} --tls-key {tls / 'key.pem'}" in made.stdout
    modes = {p.name: p.stat().st_mode & 0o777 for p in tls.iterdir()}
    assert modes == {"ca.pem": 0o644, "ca-key.pem": 0o600, "cert.pem": 0o644, "key.pem": 0o600}
    ca, cert = (tls / "ca.pem").read_bytes(), (tls / "cert.pem").read_bytes()
    # Again, for another domain: the same CA (clients keep trusting it), a new certificate.
    assert tls_init(tmp_path, "other.test").returncode == 0
    assert (tls / "ca.pem").read_bytes() == ca
    assert (tls / "cert.pem").read_bytes() != cert
    # Node refuses a certificate for *.TLD: a one-label domain is refused before anything.
    refused = tls_init(tmp_path / "one", "localhost")
    assert refused.returncode == 2
    assert "two labels" in refused.stderr
    assert not (tmp_path / "one").exists()


def test_control_api_and_sandboxes_by_name_over_https(server: TlsSandboxd) -> None:
    created = server.request("POST", f"api.{DOMAIN}", "/sandboxes",
                             json={"templateID": "base", "timeout": 120})  # fmt: skip
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    try:
        # The SDKs' get_host() is `{port}-{id}.{domain}` with this domain, not their own default.
        assert created.json()["domain"] == DOMAIN
        detail = server.request("GET", f"api.{DOMAIN}", f"/sandboxes/{sandbox_id}")
        assert detail.json()["domain"] == DOMAIN
        health = server.request("GET", f"49983-{sandbox_id}.{DOMAIN}", "/health")
        assert health.status_code == 204, health.text
    finally:
        assert (
            server.request("DELETE", f"api.{DOMAIN}", f"/sandboxes/{sandbox_id}").status_code == 204
        )


@pytest.mark.parametrize("domain", ["e2b.app", "localhost.localdomain"])
def test_a_sandbox_host_under_another_domain_is_400_naming_serve_s(
    server: TlsSandboxd, domain: str
) -> None:
    # E2B's domain, as get_host() gave it before serve told the SDKs its own, sent without the
    # API key as a browser or curl does (the control API answered 401 for want of it).
    answer = server.request("GET", f"api.{DOMAIN}", "/", key=False,
                            headers={"Host": f"8000-i0123456789abcdefghij.{domain}"})  # fmt: skip
    assert answer.status_code == 400, answer.text
    assert f"'{DOMAIN}'" in answer.text
    assert f"{{port}}-{{sandboxID}}.{DOMAIN}" in answer.text


def test_a_key_that_is_not_the_certificate_s_is_refused_before_anything(
    tmp_path: Path, base_template: Path
) -> None:
    assert tls_init(tmp_path, DOMAIN).returncode == 0
    tls, state_dir = tmp_path / "tls", tmp_path / "state"
    serve = [sys.executable, "-m", "sandboxd", "serve", NO_NETWORK, "--state-dir", str(state_dir),
             "--base-rootfs", str(base_template)]  # fmt: skip
    for flags, message in [
        (["--tls-cert", str(tls / "ca.pem"), "--tls-key", str(tls / "key.pem")], "KEY_VALUES"),
        (["--tls-cert", str(tls / "cert.pem")], "--tls-cert and --tls-key go together"),
    ]:
        refused = subprocess.run([*serve, *flags], capture_output=True, text=True, check=False)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr
        assert refused.stderr.count("\n") == 1  # one line, no traceback
    assert not state_dir.exists()
