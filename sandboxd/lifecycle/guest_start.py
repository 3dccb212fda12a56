"""The last steps of every boot of a sandbox, whether a create's, a resume's from disk or a
fork's: its box reachable by sandboxd's envd client, its egress rules applied before envd serves
anyone, and envd's /init (env vars, token, user, workdir) taken. A create's record kept
elsewhere (a node agent's row in its cluster's catalog, sandboxd.node.catalog_record) is
written meanwhile: /init's round trips hide the write's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

from sandboxd.errors import SandboxError
from sandboxd.guest.init import init_envd
from sandboxd.lifecycle.egress import apply_network

if TYPE_CHECKING:
    from sandboxd.guest.client import EnvdClient
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Box, Runtime

log = logging.getLogger("sandboxd.lifecycle.guest_start")


class CreateRecord(Protocol):
    """A new sandbox's record outside this machine's store."""

    async def write(self, sandbox: Sandbox) -> None:
        """Raises SandboxError (StoreUnavailable): it was not written."""

    async def remove(self, sandbox: Sandbox) -> None:
        """Undo `write`. Raises SandboxError: it could not."""


async def start_guest(runtime: Runtime, envd: EnvdClient, sandbox: Sandbox, box: Box,
                      record: CreateRecord | None = None) -> None:  # fmt: skip
    """Make `box` (just booted) serve as `sandbox`, `record` written meanwhile; on failure it
    is killed, sandboxd's client no longer reaches it, and `record` is removed again.

    Raises:
        HostError: the egress rules were refused; BootError, InitRefused: envd never took its
            /init, or refused it; what `record.write` raised.
    """
    envd.reach(sandbox.id, box.dialer)
    try:
        if record is None:
            await _start(runtime, envd, sandbox, box)
        else:
            await _start_recorded(runtime, envd, sandbox, box, record)
    except BaseException:
        await envd.forget(sandbox.id)
        try:
            await runtime.kill(box)
        except SandboxError:
            log.exception("sandbox %s: removing it after its start failed", sandbox.id)
        raise


async def _start(runtime: Runtime, envd: EnvdClient, sandbox: Sandbox, box: Box) -> None:
    await apply_network(runtime, box, sandbox.row.options)
    await init_envd(envd, sandbox.id, sandbox.envd_init)


async def _start_recorded(runtime: Runtime, envd: EnvdClient, sandbox: Sandbox, box: Box,
                          record: CreateRecord) -> None:  # fmt: skip
    """`_start` and `record.write` side by side, both waited for whatever the other did (a
    write cancelled half-way could still commit): a record without its sandbox is removed."""
    started, written = await asyncio.gather(
        _start(runtime, envd, sandbox, box), record.write(sandbox), return_exceptions=True
    )
    if isinstance(started, BaseException):
        if not isinstance(written, BaseException):
            # Else the record's owner drops it (a cluster's reconciliation: no node has it).
            with contextlib.suppress(SandboxError):
                await record.remove(sandbox)
        raise started
    if isinstance(written, BaseException):
        raise written
