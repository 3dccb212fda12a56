"""E2B's code interpreter as E2B builds it, through the unmodified Python SDK: from an image
without systemd (the build's provisioning installs it from the fake internet's Debian
repository), a pip install from the fake index, a server run by a systemd unit that the start
command starts with `systemctl start`, a ready check on its port. Its sandboxes boot systemd
as PID 1, answer on the port through the proxy, and systemd restarts the server when it dies."""

from __future__ import annotations

import shlex

import pytest
from e2b import Sandbox, Template, wait_for_port

from tests.sdk.builds.code_interpreter import PORT, SERVER, UNIT
from tests.sdk.builds.templates import Facts, run, through_proxy, unique
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

MAIN_PID = "sudo systemctl show -P MainPID server"


def test_a_server_started_by_systemctl_serves_and_is_restarted(
    facts: Facts, made: list[Sandbox], built: list[str]
) -> None:
    template = (
        Template()
        .from_image(facts.images["no-systemd"])
        .run_cmd(facts.pip_install("/opt/venv"), user="root")
        .run_cmd(f"printf %s {shlex.quote(SERVER)} > /opt/server.py", user="root")
        .run_cmd(f"printf %s {shlex.quote(UNIT)} > /etc/systemd/system/server.service", user="root")
        .set_start_cmd("sudo systemctl start server", wait_for_port(PORT))
    )
    name = unique("code-interpreter")
    built.append(name)
    Template.build(template, name)
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    assert run(sandbox, "cat /proc/1/comm") == "systemd"
    answer = through_proxy(sandbox, PORT)
    assert answer.status_code == 200
    assert answer.text == facts.package["greeting"]
    before = run(sandbox, MAIN_PID)
    run(sandbox, f"sudo kill -9 {before}")
    wait_until(lambda: run(sandbox, MAIN_PID) not in ("0", before), 60,
               "systemd to restart the server")  # fmt: skip

    def answers() -> bool:
        again = through_proxy(sandbox, PORT)
        return again.status_code == 200 and again.text == facts.package["greeting"]

    wait_until(answers, 60, "the restarted server to answer")
