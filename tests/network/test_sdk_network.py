"""Sandbox networking through the unmodified E2B SDKs (Python `e2b` in tests/sdk/.venv, JS
`e2b` in tests/sdk/js): `sandboxd serve --network-pool` inside the fake internet's `uplink`,
and each SDK suite a process in `uplink` too (nsenter), so that the SDK, like serve and its
sandboxes, reaches only loopback there and the fake internet. The suites
(tests/sdk/network, tests/sdk/js/network) create, update and kill sandboxes as users do; this
module checks they left none, and serve's clean-up kills any a failure left."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.network import package_index
from tests.network.fake_internet import INDEX_ADDRESS, NAMES, UPLINK_ADDRESS
from tests.network.served import UplinkSandboxd, serving_in_uplink
from tests.sandboxd.serving import API_KEY

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "tests" / "sdk"
# The suites' own tests are bounded one by one (pytest-timeout, node's --test-timeout); this
# bounds the whole run of one suite.
SUITE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def node_path() -> str:
    """The PATH with a node the JS SDK supports; scripts/sdk-env makes the SDK virtualenv and
    the JS suite's packages first if they are missing or stale (as scripts/test-sdk does)."""
    made = subprocess.run(
        [REPO / "scripts" / "sdk-env"], check=False, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UplinkSandboxd]:
    with serving_in_uplink(
        net, tmp_path_factory.mktemp("sdk-network") / "state", "--pool", "2"
    ) as server:
        yield server


def suite_env(server: UplinkSandboxd, node_path: str) -> dict[str, str]:
    """A bare environment: the SDKs' settings point at serve (its control API, its proxy, and
    `localhost`, serve's sandbox domain, for `get_host()`), and the fake internet's addresses
    and its CA (which the domain tests' sandboxes trust for HTTPS)."""
    package = {"project": package_index.PROJECT, "module": package_index.MODULE,
               "greeting": package_index.GREETING}  # fmt: skip
    facts = {"http": NAMES["example.test"], "sub": NAMES["a.example.test"],
             "other": NAMES["other.test"], "index": INDEX_ADDRESS, "package": package,
             "uplink": UPLINK_ADDRESS, "ca": server.net.ca_pem.read_text()}  # fmt: skip
    return {
        "PATH": node_path,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "E2B_API_URL": server.url,
        "E2B_SANDBOX_URL": server.url,
        "E2B_API_KEY": API_KEY,
        "E2B_DOMAIN": "localhost",
        "FAKE_INTERNET": json.dumps(facts),
    }


def suite_command(sdk: str) -> tuple[list[str], Path]:
    """The suite's command and the directory to run it in."""
    if sdk == "python":
        return [str(SDK / ".venv" / "bin" / "python"), "-m", "pytest", "-c",
                str(SDK / "pytest.ini"), "--rootdir", str(SDK), str(SDK / "network")], REPO  # fmt: skip
    files = sorted(
        str(p.relative_to(SDK / "js")) for p in (SDK / "js" / "network").glob("*.net.mjs")
    )
    assert files
    return ["node", "--test", "--test-concurrency=1", "--test-timeout=300000", *files], SDK / "js"


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("sdk", ["python", "js"])
def test_sdk_suite(
    sdk: str, server: UplinkSandboxd, net: FakeInternet, node_path: str, tmp_path: Path
) -> None:
    argv, cwd = suite_command(sdk)
    report = tmp_path / "report"
    with open(report, "wb") as out:
        suite = net.uplink.popen(argv, cwd=cwd, env=suite_env(server, node_path), stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    try:
        status = suite.wait(SUITE_TIMEOUT_S)
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
    assert status == 0, report.read_text()
    # Every sandbox a test made was killed by the test.
    assert server.api("GET", "/sandboxes").json() == []
