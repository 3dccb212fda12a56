"""Templates whose start command needs systemd, built as E2B's code interpreter is (from an
image, a pip install, a server run by a systemd unit that the start command starts with
`systemctl start`, a ready check on its port), over plain HTTP from inside `uplink` to the
session's serve. The image has no systemd: the build's provisioning installs it with the
image's apt from a Debian repository in the fake internet (tests/builds/deb_repo.py), and the
template boots with systemd as PID 1. An image without apt keeps envd as its program, and the
build's log says why."""

from __future__ import annotations

import json
import os
import shlex
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.network import package_index
from tests.network.fake_internet import INDEX_ADDRESS
from tests.network.served import UplinkSandboxd
from tests.sandboxd.serving import NO_NETWORK
from tests.sandboxd.template_cache import ensure_base_template
from tests.sdk.builds.code_interpreter import PORT, SERVER, UNIT
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
    pytest.mark.timeout(1800),
]

NO_APT = (
    "provision: the image has no /usr/bin/apt-get (only apt images get systemd so far): "
    "envd stays the image's program, without systemd"
)
MAIN_PID = ("sudo", "systemctl", "show", "-P", "MainPID", "hello")
PIP_INSTALL = (
    "python3 -m venv /opt/venv && /opt/venv/bin/pip --isolated --disable-pip-version-check "
    f"install --no-cache-dir --retries 0 --index-url http://{INDEX_ADDRESS}/simple/ "
    f"--trusted-host {INDEX_ADDRESS} {package_index.PROJECT}"
)


@pytest.fixture(scope="module")
def systemd_only(
    build_net: FakeInternet, envd_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UplinkSandboxd]:
    """A second serve in `uplink` (where the test registry is), without a network for its
    sandboxes (one networked serve per namespace), that must give every template systemd, and
    with a warm pool."""
    state = tmp_path_factory.mktemp("systemd-only") / "state"
    server = UplinkSandboxd(build_net, state, ensure_base_template(), NO_NETWORK,
                            "--envd-artifact", str(envd_artifact), "--provision", "systemd",
                            "--pool", "1")  # fmt: skip
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


@pytest.fixture
def template(build_server: UplinkSandboxd) -> Iterator[str]:
    """A fresh template name; the template is deleted afterwards."""
    name = f"systemd-{uuid.uuid4().hex[:8]}"
    yield name
    for found in build_server.api("GET", "/templates").json():
        if name in (found.get("names") or found.get("aliases") or []):
            build_server.api("DELETE", f"/templates/{found['templateID']}")


def build(server: UplinkSandboxd, name: str, recipe: dict[str, Any]) -> dict[str, Any]:
    """The v3 flow without files: the final status, with every log entry as `logEntries`."""
    made = server.api("POST", "/v3/templates", json={"name": name, "cpuCount": 2,
                                                      "memoryMB": 1024})  # fmt: skip
    assert made.status_code == 202, made.text
    path = f"/templates/{made.json()['templateID']}/builds/{made.json()['buildID']}"
    started = server.api("POST", f"/v2{path}", json={"force": False, **recipe})
    assert started.status_code == 202, started.text
    entries: list[dict[str, Any]] = []

    def ended() -> dict[str, Any] | None:
        status = server.api("GET", f"{path}/status", params={"logsOffset": len(entries)}).json()
        entries.extend(status["logEntries"])
        done = status["status"] in ("ready", "error") and not status["logEntries"]
        return {**status, "logEntries": entries} if done else None

    return wait_until(ended, 1500, f"build {path} to end")


def messages(status: dict[str, Any]) -> list[str]:
    return [e["message"] for e in status["logEntries"]]


def run_step(script: str) -> dict[str, Any]:
    return {"type": "RUN", "args": [script, "root"], "force": False}


def written(path: str, text: str) -> dict[str, Any]:
    return run_step(f"printf %s {shlex.quote(text)} > {path}")


def test_a_code_interpreter_shaped_template_boots_with_systemd_and_its_unit_serves(
    build_server: UplinkSandboxd, no_systemd_image: str, template: str
) -> None:
    recipe = {
        "fromImage": no_systemd_image,
        "steps": [
            run_step(PIP_INSTALL),
            written("/opt/server.py", SERVER),
            written("/etc/systemd/system/hello.service", UNIT),
        ],
        "startCmd": "sudo systemctl start hello",
        "readyCmd": f"curl -sf http://localhost:{PORT}/",
    }
    status = build(build_server, template, recipe)
    assert status["status"] == "ready", "\n".join(messages(status)[-40:])
    logged = messages(status)
    assert any(m.startswith("provision: systemd (") for m in logged), logged
    assert any("Unpacking systemd " in m for m in logged)  # installed now, from the repository
    sandbox = build_server.create(templateID=template)
    try:
        assert build_server.run(sandbox, "cat", "/proc/1/comm")[1].strip() == "systemd"
        assert _served(build_server, sandbox) == package_index.GREETING
        code, before, _ = build_server.run(sandbox, *MAIN_PID)
        assert code == 0
        assert build_server.run(sandbox, "sudo", "kill", "-9", before.strip())[0] == 0

        def restarted() -> bool:
            code, now, _ = build_server.run(sandbox, *MAIN_PID)
            return code == 0 and now.strip() not in ("0", before.strip())

        wait_until(restarted, 60, "systemd to restart the killed server")
        wait_until(lambda: _answers(build_server, sandbox), 60, "the restarted server to answer")
    finally:
        build_server.kill(sandbox)


def test_an_image_without_apt_keeps_envd_as_its_program_and_the_log_says_why(
    build_server: UplinkSandboxd, images: dict[str, str], template: str
) -> None:
    status = build(build_server, template, {"fromImage": images["busybox"], "steps": []})
    assert status["status"] == "ready", messages(status)[-20:]
    why = [m for m in messages(status) if m.startswith("provision: ")]
    assert why == [NO_APT]
    sandbox = build_server.create(templateID=template)
    try:
        assert build_server.run(sandbox, "cat", "/proc/1/comm")[1].strip() != "systemd"
    finally:
        build_server.kill(sandbox)


def _served(server: UplinkSandboxd, sandbox: str) -> str:
    """What the template's server answers through serve's proxy, routed by the E2B headers
    and, the same, by the Host name."""
    routed = {"E2b-Sandbox-Id": sandbox, "E2b-Sandbox-Port": str(PORT)}
    by_headers = server.net.uplink.call(lambda: httpx.get(server.url, headers=routed, timeout=30))
    named = {"Host": f"{PORT}-{sandbox}.localhost"}
    by_host = server.net.uplink.call(lambda: httpx.get(server.url, headers=named, timeout=30))
    assert by_headers.status_code == by_host.status_code == 200, (by_headers, by_host.text)
    assert by_headers.text == by_host.text
    return by_headers.text


def _answers(server: UplinkSandboxd, sandbox: str) -> bool:
    try:
        return _served(server, sandbox) == package_index.GREETING
    except (AssertionError, httpx.TransportError):
        return False


def test_provision_systemd_fails_the_build_of_an_image_that_cannot_take_it(
    systemd_only: UplinkSandboxd, images: dict[str, str], no_systemd_image: str
) -> None:
    """No apt (busybox), or apt without a network to install from: the build fails at `base`
    saying why, where `auto` would have kept envd."""
    for image, why in ((images["busybox"], "the image has no /usr/bin/apt-get"),
                       (no_systemd_image, "installing systemd with apt-get exited with code 100")):  # fmt: skip
        name = f"refused-{uuid.uuid4().hex[:8]}"
        status = build(systemd_only, name, {"fromImage": image, "steps": []})
        assert status["status"] == "error", messages(status)[-20:]
        assert status["reason"]["step"] == "base"
        assert why in status["reason"]["message"], status["reason"]
        assert "serve --provision systemd" in status["reason"]["message"]
        found = systemd_only.api("GET", f"/templates/aliases/{name}")
        assert systemd_only.api("DELETE", f"/templates/{found.json()['templateID']}").is_success


def test_the_warm_pool_holds_ready_sandboxes_of_a_systemd_template(
    systemd_only: UplinkSandboxd, images: dict[str, str]
) -> None:
    """The Debian image has systemd's set: it gets systemd without a network. Its template's
    pooled sandbox booted systemd and ran the start command (`systemctl start`) before the
    create that takes it."""
    server, template = systemd_only, f"warm-{uuid.uuid4().hex[:8]}"  # goes with the serve
    unit = UNIT.replace(
        "/opt/venv/bin/python /opt/server.py", f"/usr/bin/python3 -m http.server {PORT}"
    )
    recipe = {"fromImage": images["debian"], "steps": [written("/etc/systemd/system/hello.service", unit)],
              "startCmd": "sudo systemctl start hello", "readyCmd": f"curl -sf http://localhost:{PORT}/"}  # fmt: skip
    status = build(server, template, recipe)
    assert status["status"] == "ready", "\n".join(messages(status)[-40:])
    booted = server.create(templateID=template)  # a boot: the template's pool fills from here on
    boxes = server.state_dir / "sandboxes"
    try:

        def warm() -> str | None:
            waiting = [line.split("warm pool: sandbox ")[1].split()[0]
                       for line in server.log.read_text().splitlines()
                       if "warm pool: sandbox " in line and line.endswith(" waiting")]  # fmt: skip
            fresh = [w for w in waiting if w != booted and (boxes / w).is_dir()
                     and len(_layers(server, w)) > 1]  # fmt: skip
            return fresh[-1] if fresh else None

        pooled_id = wait_until(warm, 120, "a ready sandbox of the template in the pool")
        pooled = server.create(templateID=template)
        try:
            assert pooled == pooled_id
            assert server.run(pooled, "cat", "/proc/1/comm")[1].strip() == "systemd"
            assert (
                server.run(pooled, "sudo", "systemctl", "is-active", "hello")[1].strip() == "active"
            )
        finally:
            server.kill(pooled)
    finally:
        server.kill(booted)


def _layers(server: UplinkSandboxd, sandbox_id: str) -> list[str]:
    record = json.loads((server.box_dir(sandbox_id) / "sandbox.json").read_text())
    return list(record["layers"])
