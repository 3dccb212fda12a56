"""The last steps of every boot of a sandbox, whether a create's, a resume's from disk or a
fork's: its box reachable by sandboxd's envd client, its egress rules applied before envd serves
anyone, and envd's /init (env vars, token, user, workdir) taken."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandboxd.errors import SandboxError
from sandboxd.guest.init import init_envd
from sandboxd.lifecycle.egress import apply_network

if TYPE_CHECKING:
    from sandboxd.guest.client import EnvdClient
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Box, Runtime

log = logging.getLogger("sandboxd.lifecycle.guest_start")


async def start_guest(runtime: Runtime, envd: EnvdClient, sandbox: Sandbox, box: Box) -> None:
    """Make `box` (just booted) serve as `sandbox`; on failure it is killed, and sandboxd's
    client no longer reaches it.

    Raises:
        HostError: the egress rules were refused; BootError, InitRefused: envd never took its
            /init, or refused it.
    """
    envd.reach(sandbox.id, box.dialer)
    try:
        await apply_network(runtime, box, sandbox.row.options)
        await init_envd(envd, sandbox.id, sandbox.envd_init)
    except BaseException:
        await envd.forget(sandbox.id)
        try:
            await runtime.kill(box)
        except SandboxError:
            log.exception("sandbox %s: removing it after its start failed", sandbox.id)
        raise
