"""Running an SDK suite (Python `e2b` from tests/sdk/.venv, or JS `e2b` under node) as a
process in the fake internet's `uplink`, as tests/network/test_sdk_network.py and
tests/builds/test_sdk_builds.py do: the SDK, like serve and its sandboxes, reaches only
loopback there and the fake internet."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tests.network import package_index
from tests.network.fake_internet import INDEX_ADDRESS, NAMES, UPLINK_ADDRESS

if TYPE_CHECKING:
    from tests.network.fake_internet import FakeInternet
    from tests.network.namespaces import NetworkNamespace

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "tests" / "sdk"


def network_facts(net: FakeInternet, api_port: int) -> str:
    """FAKE_INTERNET for the networking suites (tests/sdk/network, tests/sdk/js/network): the
    echo servers', the package index's and `uplink`'s addresses, the fake internet's CA (which
    the domain tests' sandboxes trust for HTTPS), and serve's port on `uplink`."""
    package = {"project": package_index.PROJECT, "module": package_index.MODULE,
               "greeting": package_index.GREETING}  # fmt: skip
    return json.dumps({"http": NAMES["example.test"], "sub": NAMES["a.example.test"],
                       "other": NAMES["other.test"], "index": INDEX_ADDRESS, "package": package,
                       "uplink": UPLINK_ADDRESS, "ca": net.ca_pem.read_text(),
                       "api_port": api_port})  # fmt: skip


def node_path() -> str:
    """The PATH with a node the JS SDK supports; scripts/sdk-env makes the SDK virtualenv and
    the JS suite's packages first if they are missing or stale (as scripts/test-sdk does)."""
    made = subprocess.run(
        [REPO / "scripts" / "sdk-env"], check=False, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def suite_env(url: str, api_key: str, node_path: str, **extra: str) -> dict[str, str]:
    """A bare environment: the SDKs' settings point at serve at `url` (its control API, its
    proxy, and `localhost`, serve's sandbox domain, for `get_host()`); `extra` is what the
    suite reads besides (e.g. FAKE_INTERNET)."""
    return {
        "PATH": node_path,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "E2B_API_URL": url,
        "E2B_SANDBOX_URL": url,
        "E2B_API_KEY": api_key,
        "E2B_DOMAIN": "localhost",
        **extra,
    }


def suite_command(
    sdk: str, suite: str, js_suffix: str, js_timeout_s: int
) -> tuple[list[str], Path]:
    """The command of the suite `suite` (tests/sdk/SUITE for Python, tests/sdk/js/SUITE/*JS_SUFFIX
    for JS, each JS test bounded by `js_timeout_s`) and the directory to run it in."""
    if sdk == "python":
        return [str(SDK / ".venv" / "bin" / "python"), "-m", "pytest", "-c",
                str(SDK / "pytest.ini"), "--rootdir", str(SDK), str(SDK / suite)], REPO  # fmt: skip
    files = sorted(
        str(p.relative_to(SDK / "js")) for p in (SDK / "js" / suite).glob(f"*{js_suffix}")
    )
    assert files
    return ["node", "--test", "--test-concurrency=1", f"--test-timeout={js_timeout_s * 1000}",
            *files], SDK / "js"  # fmt: skip


def run_suite(uplink: NetworkNamespace, argv: list[str], cwd: Path, env: dict[str, str],
              report: Path, timeout_s: float) -> int:  # fmt: skip
    """Run the suite in `uplink`, its output into `report`; its exit status (killed if it has
    not ended after `timeout_s`)."""
    with open(report, "wb") as out:
        suite = uplink.popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        return suite.wait(timeout_s)
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
