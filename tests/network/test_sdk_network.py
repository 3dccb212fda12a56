"""Sandbox networking through the unmodified E2B SDKs (Python `e2b` in tests/sdk/.venv, JS
`e2b` in tests/sdk/js): `sandboxd serve --network-pool` inside the fake internet's `uplink`,
and each SDK suite a process in `uplink` too (nsenter), so that the SDK, like serve and its
sandboxes, reaches only loopback there and the fake internet. The suites
(tests/sdk/network, tests/sdk/js/network) create, update and kill sandboxes as users do; this
module checks they left none, and serve's clean-up kills any a failure left."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from tests.network import sdk_suites
from tests.network.served import UplinkSandboxd, serving_in_uplink
from tests.sandboxd.serving import API_KEY

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

# The suites' own tests are bounded one by one (pytest-timeout, node's --test-timeout); this
# bounds the whole run of one suite.
SUITE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def node_path() -> str:
    return sdk_suites.node_path()


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UplinkSandboxd]:
    with serving_in_uplink(
        net, tmp_path_factory.mktemp("sdk-network") / "state", "--pool", "2"
    ) as server:
        yield server


def suite_env(server: UplinkSandboxd, node_path: str) -> dict[str, str]:
    """A bare environment: the SDKs' settings point at serve (its control API, its proxy, and
    `localhost`, serve's sandbox domain, for `get_host()`), and the fake internet's facts.
    (test_sdk_domain.py runs the same suites in E2B's domain mode.)"""
    port = urlsplit(server.url).port
    assert port is not None
    facts = sdk_suites.network_facts(server.net, port)
    return sdk_suites.suite_env(server.url, API_KEY, node_path, FAKE_INTERNET=facts)


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("sdk", ["python", "js"])
def test_sdk_suite(
    sdk: str, server: UplinkSandboxd, net: FakeInternet, node_path: str, tmp_path: Path
) -> None:
    argv, cwd = sdk_suites.suite_command(sdk, "network", ".net.mjs", 300)
    report = tmp_path / "report"
    status = sdk_suites.run_suite(
        net.uplink, argv, cwd, suite_env(server, node_path), report, SUITE_TIMEOUT_S
    )
    assert status == 0, report.read_text()
    # Every sandbox a test made was killed by the test.
    assert server.api("GET", "/sandboxes").json() == []
