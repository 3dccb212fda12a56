"""/init env vars and access token as the SDK sees them, and daemon restarts between calls.

Each test has a private daemon: /init changes daemon-wide state, and a restart must not disturb
the shared one.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from e2b import AuthenticationException, ConnectionConfig, Sandbox, SandboxException
from packaging.version import Version

from tests.sdk.python.mode import debug_only

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.sdk.python.daemon import Daemon

pytestmark = debug_only


@pytest.fixture
def workdir() -> Iterator[str]:
    """A fresh directory every user may write to, on this host, where the private daemons run
    (the shared envd may be inside a booted image), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="sdk-e2e-"))
    path.chmod(0o777)
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Access tokens the tests set and present.
VALID = "s3cret"
INVALID = "wrong"


def sandbox_at(daemon: Daemon, token: str | None = None) -> Sandbox:
    """A Sandbox bound to a private daemon; with a token, sent the way the SDK sends its own."""
    if token is None:
        return Sandbox.create(sandbox_url=daemon.url)
    # Only a non-debug create() learns a token (from the E2B API); the constructor is how the
    # SDK then builds the sandbox, so the test builds it the same way.
    config = ConnectionConfig(
        sandbox_url=daemon.url, extra_sandbox_headers={"X-Access-Token": token}
    )
    return Sandbox(
        sandbox_id="debug_sandbox_id",
        sandbox_domain=None,
        envd_version=Version("99.99.99"),
        envd_access_token=token,
        connection_config=config,
    )


def test_create_with_envs_in_debug_mode_does_not_call_init(daemon: Daemon) -> None:
    sandbox = Sandbox.create(sandbox_url=daemon.url, envs={"FROM_CREATE": "x"})
    assert sandbox.commands.run("echo ${FROM_CREATE:-unset}").stdout == "unset\n"


def test_init_env_vars_reach_commands_and_per_command_envs_win(daemon: Daemon) -> None:
    assert (
        daemon.init({"envVars": {"SANDBOX_WIDE": "yes", "OVERRIDDEN": "init"}}).status_code == 204
    )
    sandbox = sandbox_at(daemon)
    result = sandbox.commands.run(
        'echo "$SANDBOX_WIDE $OVERRIDDEN $E2B_SANDBOX"', envs={"OVERRIDDEN": "command"}
    )
    assert result.stdout == "yes command false\n"

    # A later /init replaces the whole set.
    assert daemon.init({"envVars": {"ONLY": "this"}}).status_code == 204
    assert sandbox.commands.run('echo "${SANDBOX_WIDE:-gone} $ONLY"').stdout == "gone this\n"


def test_init_default_user_and_workdir(daemon: Daemon, workdir: str) -> None:
    assert daemon.init({"defaultUser": "user", "defaultWorkdir": workdir}).status_code == 204
    sandbox = sandbox_at(daemon)
    assert sandbox.commands.run("whoami; pwd").stdout == f"user\n{workdir}\n"
    assert sandbox.files.write(f"{workdir}/f.txt", "x").path == f"{workdir}/f.txt"
    assert sandbox.files.get_info(f"{workdir}/f.txt").owner == "user"
    # As in the reference envd, relative file paths resolve against the user's home, not the
    # default workdir (which only applies to commands).
    name = f"sdk-e2e-{uuid.uuid4().hex}.txt"
    try:
        assert sandbox.files.write(name, "x").path == f"/home/user/{name}"
    finally:
        sandbox.files.remove(f"/home/user/{name}")


def test_access_token(daemon: Daemon, workdir: str) -> None:
    assert daemon.init({"accessToken": VALID}).status_code == 204

    good = sandbox_at(daemon, token=VALID)
    good.files.write(f"{workdir}/t.txt", "ok")
    assert good.files.read(f"{workdir}/t.txt") == "ok"
    assert good.commands.run("echo ok").stdout == "ok\n"

    wrong = sandbox_at(daemon, token=INVALID)
    with pytest.raises(AuthenticationException):
        wrong.files.list(workdir)
    with pytest.raises(AuthenticationException):
        wrong.commands.run("echo never")
    with pytest.raises(AuthenticationException):
        sandbox_at(daemon).files.get_info(workdir)  # no token at all

    # /files checks the header too: a wrong one is refused, not ignored.
    with pytest.raises(AuthenticationException):
        wrong.files.read(f"{workdir}/t.txt")
    with pytest.raises(AuthenticationException):
        wrong.files.write(f"{workdir}/t.txt", "overwritten")
    assert good.files.read(f"{workdir}/t.txt") == "ok"

    # Once set, the token cannot be reset without presenting it.
    assert daemon.init({"accessToken": "other"}).status_code == 401
    assert daemon.init({"accessToken": VALID}, token=VALID).status_code == 204


def test_envd_restart_between_calls(daemon: Daemon, workdir: str) -> None:
    sandbox = sandbox_at(daemon)
    assert sandbox.commands.run("echo before").stdout == "before\n"

    daemon.stop()
    with pytest.raises(SandboxException) as caught:
        sandbox.commands.run("echo while-down")
    assert "sandbox" in str(caught.value).lower()
    with pytest.raises(SandboxException):
        sandbox.files.read(f"{workdir}/anything")

    daemon.start()
    assert sandbox.is_running()
    assert sandbox.commands.run("echo after").stdout == "after\n"
    sandbox.files.write(f"{workdir}/after.txt", "x")
    assert sandbox.files.read(f"{workdir}/after.txt") == "x"


def test_envd_stopped_while_command_streams(daemon: Daemon) -> None:
    sandbox = sandbox_at(daemon)
    # Bounded (10 s), so nothing outlives the test should the daemon leave its children running.
    cmd = "for i in $(seq 200); do echo tick; sleep 0.05; done"
    handle = sandbox.commands.run(cmd, background=True)
    ticks = 0
    for out, _, _ in handle:
        ticks += (out or "").count("tick")
        if ticks >= 3:
            break
    daemon.stop()
    # envd ends open streams on SIGTERM (the SDK sees no end event) instead of hanging them:
    # a hung stream would keep wait() from returning (the suite's timeout ends it).
    with pytest.raises(Exception, match="ended without an end event"):
        handle.wait()
    daemon.start()
    assert sandbox.commands.run("echo back").stdout == "back\n"


def test_signed_file_urls(daemon: Daemon, workdir: str) -> None:
    """With a token set, the SDK's upload/download URLs carry a signature instead of the header."""
    assert daemon.init({"accessToken": VALID}).status_code == 204
    sandbox = sandbox_at(daemon, token=VALID)
    path = f"{workdir}/signed.txt"

    upload = httpx.post(sandbox.upload_url(path), files={"file": ("signed.txt", b"via url")})
    assert upload.status_code == 200, upload.text
    assert httpx.get(sandbox.download_url(path)).content == b"via url"
    expiring = sandbox.download_url(path, use_signature_expiration=60)
    assert httpx.get(expiring).content == b"via url"

    tampered = httpx.get(sandbox.download_url(path).replace("signed.txt", "other.txt", 1))
    assert (tampered.status_code, tampered.json()["message"]) == (401, "invalid signature")
    expired = httpx.get(sandbox.download_url(path, use_signature_expiration=-10))
    assert (expired.status_code, expired.json()["message"]) == (401, "signature is already expired")
