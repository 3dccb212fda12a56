"""Requests to a server in the sandbox through sandboxd's proxy, by the host `get_host()` gives,
as the unmodified Python SDK sets a sandbox up: `allow_public_traffic=False` asks for the
sandbox's `traffic_access_token` in `e2b-traffic-access-token` (403 without it or with another),
and `mask_request_host` is the Host the server sees."""

from __future__ import annotations

import contextlib
import os
import shlex
from typing import TYPE_CHECKING

import httpx
from e2b import Sandbox

from tests.network.in_sandbox import script
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from e2b import CommandHandle

PORT = 8000
ECHO_HOST = script("echo_host")
TRAFFIC_HEADER = "e2b-traffic-access-token"


def through_proxy(sandbox: Sandbox, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET / of the sandbox's port PORT, sent to sandboxd by the sandbox's host name: to
    E2B_SANDBOX_URL with it as Host, or (E2B's domain mode) to https://HOST itself, trusting
    SSL_CERT_FILE as the SDK does."""
    host = sandbox.get_host(PORT)
    url = os.environ.get("E2B_SANDBOX_URL", f"https://{host}")
    return httpx.get(url + "/", headers={"Host": host, **(headers or {})}, timeout=30)


@contextlib.contextmanager
def serving(sandbox: Sandbox) -> Iterator[CommandHandle]:
    """The Host echo on PORT in the sandbox, as a background command, killed afterwards."""
    server = sandbox.commands.run(f"python3 -c {shlex.quote(ECHO_HOST)} {PORT}", background=True)
    try:
        yield server
    finally:
        server.kill()


def test_private_traffic_needs_the_token_and_the_host_is_masked(made: list[Sandbox]) -> None:
    network = {"allow_public_traffic": False, "mask_request_host": "app.test:${PORT}"}
    sandbox = Sandbox.create(network=network)
    made.append(sandbox)
    token = sandbox.traffic_access_token
    assert token
    with_token = {TRAFFIC_HEADER: token}
    with serving(sandbox):
        # 502 until the server listens.
        wait_until(lambda: through_proxy(sandbox, with_token).status_code == 200, 30,
                   "the sandbox's server to answer through the proxy")  # fmt: skip
        assert through_proxy(sandbox, with_token).json() == {"host": f"app.test:{PORT}"}
        assert through_proxy(sandbox).status_code == 403
        assert through_proxy(sandbox, {TRAFFIC_HEADER: token[::-1]}).status_code == 403


def test_public_traffic_by_default_keeps_the_host(made: list[Sandbox]) -> None:
    sandbox = Sandbox.create()
    made.append(sandbox)
    assert sandbox.traffic_access_token is None
    with serving(sandbox):
        wait_until(lambda: through_proxy(sandbox).status_code == 200, 30,
                   "the sandbox's server to answer through the proxy")  # fmt: skip
        assert through_proxy(sandbox).json() == {"host": sandbox.get_host(PORT)}
