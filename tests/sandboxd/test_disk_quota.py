"""Sandboxes' files kept as layers count against the state disk's storage quota
(`--build-storage-mb`: uploads and layers): a pause (to disk, or a freeze, whose files are
written too), a snapshot or a fork whose layer would pass it is refused with a 507 naming the
quota, its layer removed, and the sandbox runs on as before; once it wrote less, it pauses, and
`sandboxd template ls` shows what its pause layer takes."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.sandboxd.guest_shell import sh
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.sandboxd.test_disk_pause import FS, create

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

QUOTA = "would pass the build storage quota of 4 MiB"


def kept_layers(state: Path) -> list[str]:
    prefixes = ("pause-", "snapshot-", "fork-")
    return [p.name for p in (state / "layers").iterdir() if p.name.startswith(prefixes)]


def test_a_pause_snapshot_or_fork_past_the_quota_is_refused(
    tmp_path: Path, base_template: Path
) -> None:
    state = tmp_path / "state"
    with (
        running_sandboxd(state, base_template, NO_NETWORK, "--build-storage-mb", "4") as server,
        server.client() as api,
    ):
        sandbox = create(api)
        sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
        sh(server, sid, "head -c 8388608 /dev/urandom > /home/user/big && sync", token)

        for path, body in ((f"/sandboxes/{sid}/pause", FS), (f"/sandboxes/{sid}/pause", {}),
                           (f"/sandboxes/{sid}/snapshots", {}), (f"/sandboxes/{sid}/fork", {})):  # fmt: skip
            refused = api.post(path, json=body)
            assert refused.status_code == 507, (path, body, refused.text)
            assert QUOTA in refused.json()["message"], refused.text
            assert api.get(f"/sandboxes/{sid}").json()["state"] == "running"
            assert sh(server, sid, "wc -c < /home/user/big", token) == "8388608\n"
            assert kept_layers(state) == []
        assert api.get("/snapshots").json() == []

        smaller = "rm /home/user/big && head -c 1048576 /dev/urandom > /home/user/small && sync"
        sh(server, sid, smaller, token)
        assert api.post(f"/sandboxes/{sid}/pause", json=FS).status_code == 204
        listing = template_ls(state).splitlines()
        paused = next(line for line in listing if line.startswith(sid)).split()
        assert paused[1] == "filesystem"
        assert float(paused[2]) >= 1.0  # MiB: what it wrote, in its pause layer
        assert api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}).status_code == 201
        assert sh(server, sid, "wc -c < /home/user/small", token) == "1048576\n"
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def template_ls(state: Path) -> str:
    argv = [sys.executable, "-m", "sandboxd", "template", "ls", "--state-dir", str(state)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout
