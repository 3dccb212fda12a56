"""The README as a newcomer follows it: its first command, `scripts/start`, gives a working
sandbox service and prints what to export and a one-line SDK example that works as pasted; and
every ```python block of README.md runs as written with the unmodified SDK (its own virtualenv,
tests/sdk/.venv) against that service, with only the variables the README names.

scripts/start runs here as a user runs it, with serve's flags after it for a free port, a
temporary state directory, the cached base template and a cgroup parent of the test's own; its
sandboxes have no network (its default, `--no-network`, which tests outside the fake internet
need). The blocks run in a directory holding `site/`, which the README's template example copies
("a directory `site/` of yours")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.removal import remove_tree
from tests.network import sdk_suites
from tests.sandboxd.serving import free_port, kill_sandboxes
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

README = sdk_suites.REPO / "README.md"
SDK_BIN = sdk_suites.SDK / ".venv" / "bin"
SITE_INDEX = "<h1>a site of my own</h1>\n"
# What serve needs to come up: scripts/install, then (the base template given) seconds.
START_TIMEOUT_S = 600
BLOCK_TIMEOUT_S = 600  # the template example builds a template

pytestmark = [
    pytest.mark.root,
    # scripts/install and serve's start in the first test's setup; a template build in one test
    pytest.mark.timeout(START_TIMEOUT_S + BLOCK_TIMEOUT_S),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: scripts/start serves sandboxes"),
]


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    out: Path  # what scripts/start printed
    err: Path  # serve's log
    port: int
    state: Path

    def printed(self) -> str:
        return self.out.read_text()

    def exports(self) -> dict[str, str]:
        """The variables of the printed `export` lines."""
        found = re.findall(r"^export (.*)$", self.printed(), re.MULTILINE)
        return dict(pair.split("=", 1) for line in found for pair in line.split())


@pytest.fixture(scope="module")
def sdk_env() -> None:
    """The SDK's virtualenv made or refreshed (scripts/sdk-env)."""
    sdk_suites.node_path()


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Started]:
    work = tmp_path_factory.mktemp("start")
    state, port = work / "state", free_port()
    cgroup = f"sandboxd-test-{os.getpid()}-start"
    argv = [str(sdk_suites.REPO / "scripts" / "start"), "--port", str(port),
            "--state-dir", str(state), "--base-rootfs", str(base_template),
            "--cgroup-parent", cgroup]  # fmt: skip
    out, err = work / "start.out", work / "start.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
    started = Started(proc, out, err, port, state)

    def listening() -> bool:
        assert proc.poll() is None, f"scripts/start exited: {out.read_text()}{err.read_text()}"
        return "listening on" in err.read_text()

    try:
        wait_until(listening, START_TIMEOUT_S, "scripts/start to serve")
        yield started
    finally:
        proc.send_signal(signal.SIGTERM)  # serve itself: the script execs it
        proc.wait(timeout=60)
        kill_sandboxes(state, cgroup)
        remove_tree(state)
    assert "Traceback" not in err.read_text(), err.read_text()[-3000:]


def run_sdk(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`script` (Python) by the SDK's interpreter, with a bare environment and `env`."""
    return subprocess.run(
        [str(SDK_BIN / "python"), "-c", script], cwd=cwd, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8", **env},
        timeout=BLOCK_TIMEOUT_S, check=False,
    )  # fmt: skip


def test_start_says_what_it_serves_and_keeps_its_key(started: Started) -> None:
    log = started.err.read_text()
    assert (f"listening on http://127.0.0.1:{started.port}, sandbox domain localhost, sandbox "
            "networking off") in log, log  # fmt: skip
    assert "Sandbox networking off" in started.printed()
    key_file = started.state / "start-api-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert started.exports()["E2B_API_KEY"] == key_file.read_text().strip()


def test_the_printed_example_works_as_pasted(
    started: Started, sdk_env: None, tmp_path: Path
) -> None:
    """The export lines and the example line, pasted into a shell whose python3 has the SDK."""
    lines = started.printed().splitlines()
    pasted = [line for line in lines if line.startswith(("export ", "python3 -c "))]
    assert len(pasted) == 3, started.printed()
    done = subprocess.run(
        ["sh", "-ec", "\n".join(pasted)], cwd=tmp_path, capture_output=True, text=True,
        env={"PATH": f"{SDK_BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        timeout=BLOCK_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from user\n\n", done.stdout


def test_every_python_block_of_the_readme_runs_as_written(
    started: Started, sdk_env: None, tmp_path: Path
) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 2
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text(SITE_INDEX)
    outputs = []
    for block in blocks:
        done = run_sdk(block, tmp_path, started.exports())
        assert done.returncode == 0, f"{block}\n{done.stderr}"
        outputs.append(done.stdout)
    everything = "".join(outputs)
    assert "hello from user\n" in everything
    assert "Hello, sandbox!\n" in everything
    assert SITE_INDEX in everything  # the template's start command served the copied site
    assert "Hello, volume!\n['hello.txt']\n" in everything


def test_get_host_names_serves_domain_without_e2b_domain(
    started: Started, sdk_env: None, tmp_path: Path
) -> None:
    """The sandbox's record names serve's domain, so the SDK's get_host() is a host serve's
    proxy routes, with E2B_DOMAIN unset (the SDK's own default is E2B's cloud)."""
    script = ("from e2b import Sandbox\ns = Sandbox.create()\n"
              "print(s.sandbox_id, s.get_host(8000))\ns.kill()")  # fmt: skip
    done = run_sdk(script, tmp_path, started.exports())
    assert done.returncode == 0, done.stderr
    sandbox_id, host = done.stdout.split()
    assert host == f"8000-{sandbox_id}.localhost"
