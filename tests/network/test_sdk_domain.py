"""E2B's domain mode through the unmodified SDKs: the SDK's process is given E2B_DOMAIN, the
API key and its trust of serve's CA, nothing else, and reaches `https://api.DOMAIN` and
`https://{port}-{id}.DOMAIN` by name, as the SDKs will once E2B_API_URL and E2B_SANDBOX_URL are
gone. `sandboxd serve` runs in the fake internet's `uplink` on port 443 with the certificate
`sandboxd tls init` made; the fake internet's DNS answers `*.DOMAIN` with `uplink`'s address,
and the suite's process reads that DNS through an /etc/resolv.conf bound over the host's in a
mount namespace of its own (the host's file is untouched). The suites: tests/sdk/domain
(Python, SSL_CERT_FILE) and tests/sdk/js/domain/*.domain.mjs (JS, NODE_EXTRA_CA_CERTS)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.network import sdk_suites
from tests.network.fake_internet import DNS_ADDRESS, UPLINK_ADDRESS, running_fake_internet
from tests.network.served import POOL, UplinkSandboxd
from tests.sandboxd.serving import API_KEY
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

DOMAIN = "sandboxes.test"
SUITE_TIMEOUT_S = 600
# Run with its first argument bound over /etc/resolv.conf, then the rest (in a private mount
# namespace: the bind is gone with the process).
WITH_RESOLV_CONF = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'


class DomainSandboxd(UplinkSandboxd):
    """serve in `uplink` on 443 over HTTPS, asked for by `api.DOMAIN` (SNI and Host) at
    `uplink`'s 127.0.0.1: the harness's own requests need no resolver."""

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        name = f"api.{DOMAIN}"
        headers = {**self.headers, "Host": name}
        trust = ssl.create_default_context(cafile=self.state_dir / "tls" / "ca.pem")
        timeout = kwargs.pop("timeout", 60)

        def ask() -> httpx.Response:
            with httpx.Client(verify=trust, timeout=timeout) as client:
                return client.request(method, f"https://127.0.0.1:443{path}", headers=headers,
                                      extensions={"sni_hostname": name}, **kwargs)  # fmt: skip

        return self.net.uplink.call(ask)


@pytest.fixture(scope="module")
def net() -> Iterator[FakeInternet]:
    """The fake internet, its DNS answering `*.DOMAIN` (`api.DOMAIN` too) with `uplink`'s
    address, where serve listens."""
    with running_fake_internet(dns_only={f"*.{DOMAIN}": UPLINK_ADDRESS}) as net:
        yield net


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DomainSandboxd]:
    state_dir = tmp_path_factory.mktemp("sdk-domain") / "state"
    made = subprocess.run([sys.executable, "-m", "sandboxd", "tls", "init", "--state-dir",
                           str(state_dir), "--domain", DOMAIN], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    tls = state_dir / "tls"
    server = DomainSandboxd(net, state_dir, ensure_base_template(), "--network-pool", POOL,
                            "--dns", DNS_ADDRESS, "--bind", "0.0.0.0", "--port", "443",
                            "--domain", DOMAIN, "--tls-cert", str(tls / "cert.pem"),
                            "--tls-key", str(tls / "key.pem"))  # fmt: skip
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


@pytest.fixture(scope="module")
def node_path() -> str:
    return sdk_suites.node_path()


def domain_env(server: DomainSandboxd, node_path: str) -> dict[str, str]:
    """A bare environment: E2B_DOMAIN, the key, and the CA for each SDK's TLS (Python's pyqwest
    reads SSL_CERT_FILE, node NODE_EXTRA_CA_CERTS)."""
    ca = str(server.state_dir / "tls" / "ca.pem")
    return {"PATH": node_path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
            "E2B_DOMAIN": DOMAIN, "E2B_API_KEY": API_KEY, "SSL_CERT_FILE": ca,
            "NODE_EXTRA_CA_CERTS": ca, "FAKE_INTERNET": sdk_suites.network_facts(server.net, 443)}  # fmt: skip


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("sdk", ["python", "js"])
@pytest.mark.parametrize(
    ("suite", "js_suffix"), [("domain", ".domain.mjs"), ("network", ".net.mjs")]
)
def test_sdk_in_domain_mode(
    sdk: str,
    suite: str,
    js_suffix: str,
    server: DomainSandboxd,
    net: FakeInternet,
    node_path: str,
    tmp_path: Path,
) -> None:
    """The domain suite (create, a command, files, get_host's https URL), and the networking
    suite that test_sdk_network.py runs with E2B_API_URL and E2B_SANDBOX_URL."""
    argv, cwd = sdk_suites.suite_command(sdk, suite, js_suffix, 300)
    resolv_conf = tmp_path / "resolv.conf"
    resolv_conf.write_text(f"nameserver {DNS_ADDRESS}\n")
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            WITH_RESOLV_CONF, str(resolv_conf), *argv]  # fmt: skip
    report = tmp_path / "report"
    status = sdk_suites.run_suite(
        net.uplink, argv, cwd, domain_env(server, node_path), report, SUITE_TIMEOUT_S
    )
    assert status == 0, report.read_text()
    assert server.api("GET", "/sandboxes").json() == []
