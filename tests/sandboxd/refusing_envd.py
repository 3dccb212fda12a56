"""A warm sandbox whose envd is swapped for a stand-in that answers `/health` and refuses every
POST with a 413 (as envd refuses a body past its cap): the create that takes the sandbox fails
at `/init`. For serve and node agents alike (tests.sandboxd.serving Sandboxd)."""

from __future__ import annotations

import shlex
import subprocess
from typing import TYPE_CHECKING

from sandboxd.runtime.nspawn import container
from tests.waiting import wait_until

if TYPE_CHECKING:
    from tests.sandboxd.serving import Sandboxd

STAND_IN = """
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(413); self.send_header("content-length", "0"); self.end_headers()
http.server.ThreadingHTTPServer(("0.0.0.0", 49983), Handler).serve_forever()
"""


def warm_box_refusing_init(server: Sandboxd) -> str:
    """The id of `server`'s warm sandbox (its pool of one filled), its envd swapped."""
    boxes = server.state_dir / "sandboxes"

    def warm_one() -> str | None:
        found = next(boxes.iterdir(), None) if boxes.is_dir() else None
        return None if found is None else found.name

    waiting = wait_until(warm_one, 60, "a warm sandbox")
    wait_until(lambda: server.envd(waiting, "GET", "/health")[0] == 204, 60, "its envd")
    supervisor = container.supervisor(server.cgroups(waiting))
    assert supervisor is not None
    leader = container.leader(supervisor)
    assert leader is not None
    swap = ("systemctl stop envd && systemd-run -q --unit refusing-envd python3 -c "
            + shlex.quote(STAND_IN))  # fmt: skip
    subprocess.run(["nsenter", "-t", str(leader), "-a", "sh", "-c", swap], check=True)
    wait_until(lambda: server.envd(waiting, "GET", "/health")[0] == 204, 30, "the stand-in")
    return waiting
