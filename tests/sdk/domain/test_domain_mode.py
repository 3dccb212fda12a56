"""The unmodified Python SDK with E2B_DOMAIN only: the control API at `https://api.DOMAIN`,
envd at `https://49983-{id}.DOMAIN`, and a server in the sandbox at `https://{get_host(port)}`,
each a name the SDK's process resolves and a certificate it verifies."""

from __future__ import annotations

import os
import ssl

import httpx
from e2b import Sandbox

from tests.sdk.python.sandboxes import create
from tests.waiting import wait_until

PORT = 8000


def test_commands_files_and_a_port_by_get_host(made: list[Sandbox]) -> None:
    sandbox = create(made)
    assert sandbox.commands.run("echo hello from $(whoami)").stdout == "hello from user\n"
    sandbox.files.write("/home/user/hello.txt", "Hello, sandbox!")
    assert sandbox.files.read("/home/user/hello.txt") == "Hello, sandbox!"
    assert sandbox.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]

    host = sandbox.get_host(PORT)
    assert host == f"{PORT}-{sandbox.sandbox_id}.{os.environ['E2B_DOMAIN']}"
    server = sandbox.commands.run(
        f"python3 -m http.server {PORT} --directory /home/user", background=True
    )
    trust = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    with httpx.Client(verify=trust, timeout=30) as client:
        # 502 until the server listens.
        wait_until(lambda: client.get(f"https://{host}/hello.txt").status_code == 200, 30,
                   "the sandbox's server to answer at its host")  # fmt: skip
        assert client.get(f"https://{host}/hello.txt").text == "Hello, sandbox!"
    server.kill()
    sandbox.kill()
    assert sandbox.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]
