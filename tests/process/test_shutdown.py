"""SIGTERM to envd: open streams end cleanly, children are stopped (SIGKILL for the stubborn)."""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import anyio
import pytest
from connectrpc.codec import proto_json_codec

from envd._gen.process.process_connect import ProcessClient
from tests.process.conftest import Run, shell

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio


async def _read_all(stream: AsyncIterator[object], run: Run) -> None:
    async for response in stream:
        run.add(response.event)  # type: ignore[attr-defined]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_sigterm_ends_streams_and_stops_children(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory()
    runs = [Run(), Run()]
    scripts = ["sleep 300", "trap '' TERM; exec sleep 300"]  # the second ignores SIGTERM
    async with ProcessClient(daemon.url, codec=proto_json_codec(), send_compression=None) as client:
        # Ended at once, but its background sleep lives on in its group, holding the pipe.
        ended = Run()
        await _read_all(client.start(shell("sleep 300 & echo bg")), ended)
        assert ended.end is not None
        streams = [client.start(shell(script)) for script in scripts]
        for stream, run in zip(streams, runs, strict=True):
            run.add((await anext(stream)).event)
        async with anyio.create_task_group() as tg:
            for stream, run in zip(streams, runs, strict=True):
                tg.start_soon(_read_all, stream, run)
            started = time.monotonic()
            with anyio.fail_after(15):
                exit_code = await anyio.to_thread.run_sync(daemon.stop)
    assert exit_code in (0, -signal.SIGTERM)  # uvicorn re-raises the SIGTERM it handled
    assert time.monotonic() - started < 8
    for run in runs:
        assert run.order == ["start"]  # ended cleanly: no error, no end event
    with anyio.fail_after(5):
        while any(_group_alive(run.pid) for run in [*runs, ended]):
            await anyio.sleep(0.05)
