"""Template builds through the unmodified E2B SDKs (Python `e2b` in tests/sdk/.venv, JS `e2b` in
tests/sdk/js): the suites tests/sdk/builds and tests/sdk/js/builds run as processes in the
fake internet's `uplink`, against the session's `sandboxd serve` there, and build from the
images in the test's own registry (tests/builds/conftest.py). RUN steps install from the fake
internet's package index. This module checks that the suites left no sandbox and no template
behind (each deletes what it built)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from tests.network import package_index, sdk_suites
from tests.network.fake_internet import INDEX_ADDRESS

if TYPE_CHECKING:
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet
    from tests.network.served import UplinkSandboxd

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

# The suites bound each of their tests; this bounds a whole suite (builds boot sandboxes).
SUITE_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def node_path() -> str:
    return sdk_suites.node_path()


def suite_env(
    server: UplinkSandboxd, net: FakeInternet, images: dict[str, str], node_path: str
) -> dict[str, str]:
    """The suite's environment (sdk_suites.suite_env); BUILD_FACTS (JSON) says where the images and the package index
    are, and the index's directory, where a suite puts files its build steps wait for."""
    facts = {"images": images, "index": INDEX_ADDRESS, "indexRoot": str(net.workdir / "index"),
             "package": {"project": package_index.PROJECT, "module": package_index.MODULE,
                         "greeting": package_index.GREETING}}  # fmt: skip
    return sdk_suites.suite_env(
        server.url, server.headers["X-API-Key"], node_path, BUILD_FACTS=json.dumps(facts)
    )


def template_names(server: UplinkSandboxd) -> list[str]:
    listed = server.api("GET", "/templates")
    assert listed.status_code == 200, listed.text
    return sorted(n for t in listed.json() for n in t.get("names") or t.get("aliases") or [])


@pytest.mark.timeout(SUITE_TIMEOUT_S + 120)
@pytest.mark.parametrize("sdk", ["python", "js"])
def test_sdk_suite(
    sdk: str,
    build_server: UplinkSandboxd,
    build_net: FakeInternet,
    images: dict[str, str],
    no_systemd_image: str,
    node_path: str,
    tmp_path: Path,
) -> None:
    before = template_names(build_server)
    argv, cwd = sdk_suites.suite_command(sdk, "builds", ".build.mjs", 900)
    all_images = {**images, "no-systemd": no_systemd_image}  # tests/sdk/builds/test_systemd_*
    env = suite_env(build_server, build_net, all_images, node_path)
    report = tmp_path / "report"
    status = sdk_suites.run_suite(build_net.uplink, argv, cwd, env, report, SUITE_TIMEOUT_S)
    assert status == 0, report.read_text()
    # Every sandbox a test made was killed, every template it built deleted, by the test.
    assert build_server.api("GET", "/sandboxes").json() == []
    assert template_names(build_server) == before
