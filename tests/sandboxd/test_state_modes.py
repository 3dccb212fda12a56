"""The state directory against the host's other users: a real serve started under umask 022, on
a state directory an earlier sandboxd left open, ends with nothing in it the unprivileged host
user `user` can read (the store and its WAL holding a create's `envVars`, the tokens' secret),
and its sandboxes still boot and serve their own users as before."""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.daemon.state_dir import SECRET_FILE
from sandboxd.guest.client import EnvdClient
from sandboxd.guest.commands import LOGIN_BASH, Command, run
from sandboxd.host.removal import remove_tree
from sandboxd.store.sqlite.database import DB_FILE
from tests.sandboxd.serving import NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root

SECRET_FILES = (DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", SECRET_FILE)
# serve run as a caller with the usual umask would run it.
UMASK_022 = ["sh", "-c", 'umask 022 && exec "$@"', "sh"]


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A directory every host user may search (pytest's own temp dirs are root's, 0700, and
    would hide an open state directory from `user`)."""
    parent = Path(tempfile.mkdtemp(prefix="sandboxd-modes-"))
    parent.chmod(0o755)
    yield parent
    remove_tree(parent)


def as_user(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["setpriv", "--reuid=user", "--regid=user", "--clear-groups", *argv],
        capture_output=True,
        check=False,
    )


def assert_closed(state: Path) -> None:
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in SECRET_FILES:
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
        assert as_user("cat", str(state / name)).returncode != 0, f"user read {name}"
    assert as_user("ls", str(state)).returncode != 0


async def _run_as_user(server: Sandboxd, sandbox_id: str, script: str) -> tuple[int, bytes]:
    netns = server.netns(sandbox_id)
    envd = EnvdClient()
    envd.reach(sandbox_id, netns)
    out = bytearray()
    try:
        code = await run(envd, sandbox_id, Command(script, LOGIN_BASH, user="user"),
                         on_output=lambda _kind, data: out.extend(data))  # fmt: skip
    finally:
        await envd.aclose()
        netns.close()
    return code, bytes(out)


def test_no_other_host_user_reads_the_state(open_parent: Path, base_template: Path) -> None:
    state = open_parent / "state"
    state.mkdir()
    state.chmod(0o755)  # as an earlier sandboxd left it
    (state / SECRET_FILE).write_bytes(secrets.token_bytes(32))
    (state / SECRET_FILE).chmod(0o644)
    secret = "secret-" + secrets.token_hex(16)
    server = Sandboxd(state, base_template, NO_NETWORK)
    server.command = [*UMASK_022, sys.executable, "-m", "sandboxd"]
    try:
        server.start()
        with server.client() as api:
            response = api.post("/sandboxes", json={"templateID": "base", "timeout": 120,
                                                    "envVars": {"TOKEN": secret}})  # fmt: skip
            assert response.status_code == 201, response.text
            sandbox_id = response.json()["sandboxID"]
            stored = b"".join((state / n).read_bytes() for n in (DB_FILE, f"{DB_FILE}-wal"))
            assert secret.encode() in stored  # what the check below is about
            assert_closed(state)
            # The sandbox's own users still see its root, files and home as usual.
            script = "ls / /etc >/dev/null && cat /etc/passwd >/dev/null && touch ~/made"
            script += " && stat -c %a ~/made / && printenv TOKEN"
            code, out = asyncio.run(_run_as_user(server, sandbox_id, script))
            assert (code, out) == (0, f"644\n755\n{secret}\n".encode()), out
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    finally:
        server.clean_up()
    assert_closed(state)


def test_the_command_line_makes_a_closed_state_directory(open_parent: Path) -> None:
    state = open_parent / "state"
    done = subprocess.run([*UMASK_022, sys.executable, "-m", "sandboxd", "api-key", "create",
                           "--state-dir", str(state)], capture_output=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / DB_FILE).stat().st_mode) == 0o600
    assert as_user("cat", str(state / DB_FILE)).returncode != 0
    assert os.listdir(state)
