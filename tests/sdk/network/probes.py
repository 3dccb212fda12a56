"""What the networking tests run inside a sandbox (its python3 and curl, as a user would) to see
where its traffic goes."""

from __future__ import annotations

import errno
import json
import shlex
from typing import TYPE_CHECKING, Any

from e2b import CommandExitException

from tests.network import package_index
from tests.network.in_sandbox import script

if TYPE_CHECKING:
    from e2b import Sandbox

CONNECT = script("connect")
ADDRESSES = script("addresses")
# The firewall's refusal: ICMP "administratively prohibited", EHOSTUNREACH at once.
REFUSED = str(errno.EHOSTUNREACH)
CONNECTED = "connected"
# Where a sandbox keeps the fake internet's CA (`trust`), for curl's --cacert.
CA = "/tmp/ca.pem"


def python(sandbox: Sandbox, script: str, *args: object) -> str:
    argv = " ".join(shlex.quote(str(a)) for a in ["python3", "-c", script, *args])
    out: str = sandbox.commands.run(argv).stdout
    return out.strip()


def connect(sandbox: Sandbox, address: str, port: int) -> str:
    """`connected`, or the errno (as text) a TCP connection from the sandbox got."""
    return python(sandbox, CONNECT, address, port)


def addresses(sandbox: Sandbox) -> tuple[str, str]:
    """The sandbox's own address and its gateway (the host end of its link)."""
    own, gateway = python(sandbox, ADDRESSES).split()
    return own, gateway


def curl(sandbox: Sandbox, address: str) -> Any:
    """The echo server's JSON for `GET http://ADDRESS/` from the sandbox."""
    return json.loads(sandbox.commands.run(f"curl -sS --max-time 30 http://{address}/").stdout)


def trust(sandbox: Sandbox, ca: str) -> None:
    """Give the sandbox the fake internet's CA (through the SDK's filesystem API), at CA."""
    sandbox.files.write(CA, ca)


def fetch(sandbox: Sandbox, url: str, *options: str) -> Any:
    """The echo server's JSON for curl's GET of URL from the sandbox (with these options, and
    trusting the CA `trust` gave it), or curl's exit code when it got no answer."""
    argv = ["curl", "-sS", "--max-time", "30", "--cacert", CA, *options, url]
    try:
        out: str = sandbox.commands.run(shlex.join(argv)).stdout
    except CommandExitException as e:
        code: int = e.exit_code
        return code
    return json.loads(out)


def pip_install(sandbox: Sandbox, index: str) -> str:
    """`pip install` of the fake index's package into a fresh virtualenv in the sandbox (pip
    comes with python3-venv), then its greeting, imported. A failure raises the SDK's
    CommandExitException; --retries 0: a refused connection fails at once."""
    venv = "$(mktemp -d)/venv"
    installed = sandbox.commands.run(
        f"v={venv} && python3 -m venv $v && $v/bin/pip --isolated --disable-pip-version-check "
        f"install --no-cache-dir --retries 0 --index-url http://{index}/simple/ "
        f"--trusted-host {index} {package_index.PROJECT} >&2 && "
        f"$v/bin/python -c 'import {package_index.MODULE} as m; print(m.GREETING)'",
        timeout=120,
    )
    greeting: str = installed.stdout
    return greeting.strip()
