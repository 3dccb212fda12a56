"""SIGTERM to envd: open streams end cleanly, children are stopped (SIGKILL for the stubborn),
slow transfers are cut, and envd exits on its own: by its own deadline, as nothing here ends
by itself. How long that takes, against the 5 s the systemd unit allows (TimeoutStopSec), is
measured by bench.startup."""

from __future__ import annotations

import contextlib
import signal
from typing import TYPE_CHECKING

import anyio
import pytest
from connectrpc.codec import proto_json_codec

from envd._gen.process.process_connect import ProcessClient
from tests.process.client import Run, group_alive, shell
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from anyio.abc import TaskGroup

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio

# After this the tests SIGKILL envd themselves, which fails them: it only bounds how long a
# daemon that never exits takes to fail a test (speed is bench.startup's).
GIVE_UP_S = 60
# uvicorn re-raises the SIGTERM it handled; a SIGKILL from stop() would be -SIGKILL.
STOPPED_ON_ITS_OWN = (0, -signal.SIGTERM)
# Any failure of a cut connection, as the client sees it.
_CUT = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


async def _read_all(stream: AsyncIterator[object], run: Run) -> None:
    async for response in stream:
        run.add(response.event)  # type: ignore[attr-defined]


# Two long commands, the second deaf to SIGTERM (shutdown must SIGKILL it).
STUBBORN_PAIR = ("sleep 300", "trap '' TERM; exec sleep 300")


@contextlib.asynccontextmanager
async def _streaming(client: ProcessClient) -> AsyncIterator[tuple[TaskGroup, list[Run]]]:
    """STUBBORN_PAIR started, each past its start event and read to its end in a task group."""
    runs = [Run(), Run()]
    streams = [client.start(shell(script)) for script in STUBBORN_PAIR]
    for stream, run in zip(streams, runs, strict=True):
        run.add((await anext(stream)).event)
    async with anyio.create_task_group() as tg:
        for stream, run in zip(streams, runs, strict=True):
            tg.start_soon(_read_all, stream, run)
        yield tg, runs


async def test_sigterm_ends_streams_and_stops_children(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory()
    async with ProcessClient(daemon.url, codec=proto_json_codec(), send_compression=None) as client:
        # Ended at once, but its background sleep lives on in its group, holding the pipe.
        ended = Run()
        await _read_all(client.start(shell("sleep 300 & echo bg")), ended)
        assert ended.end is not None
        async with _streaming(client) as (_, runs):
            exit_code = await anyio.to_thread.run_sync(daemon.stop, GIVE_UP_S)
    assert exit_code in STOPPED_ON_ITS_OWN
    for run in runs:
        assert run.order == ["start"]  # ended cleanly: no error, no end event
    await wait_until_async(
        lambda: not any(group_alive(run.pid) for run in [*runs, ended]), 5, "every group to end"
    )


async def _slow_download(daemon: EnvdProcess, path: Path) -> None:
    """Asks for a large file, then reads 4 KiB a tenth of a second (until cancelled: what the
    socket buffers hold would last minutes after the cut)."""
    async with await anyio.connect_tcp("127.0.0.1", daemon.port) as sock:
        await sock.send(f"GET /files?path={path} HTTP/1.1\r\nHost: envd\r\n\r\n".encode())
        with contextlib.suppress(*_CUT):
            while await sock.receive(4096):
                await anyio.sleep(0.1)


async def _slow_upload(daemon: EnvdProcess, path: Path) -> None:
    """Announces 1 GiB, then sends 1 KiB a tenth of a second until the daemon cuts it."""
    head = (
        f"POST /files?path={path} HTTP/1.1\r\nHost: envd\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 1073741824\r\n\r\n"
    )
    async with await anyio.connect_tcp("127.0.0.1", daemon.port) as sock:
        await sock.send(head.encode())
        with contextlib.suppress(*_CUT):
            while True:
                await sock.send(b"x" * 1024)
                await anyio.sleep(0.1)


async def test_sigterm_with_slow_transfers_and_streams_exits_on_its_own(
    envd_factory: Callable[..., EnvdProcess], workdir: Path
) -> None:
    daemon = envd_factory()
    big = workdir / "big.bin"
    with big.open("wb") as f:
        f.truncate(64 * 1024**3)  # sparse: far more than could be read in the test's time
    async with (
        ProcessClient(daemon.url, codec=proto_json_codec(), send_compression=None) as client,
        _streaming(client) as (tg, runs),
    ):
        tg.start_soon(_slow_download, daemon, big)
        tg.start_soon(_slow_upload, daemon, workdir / "upload.bin")
        await wait_until_async(
            lambda: daemon.holds_open(big) and daemon.holds_open(workdir / "upload.bin"),
            10,
            "both transfers to be under way",
        )
        exit_code = await anyio.to_thread.run_sync(daemon.stop, GIVE_UP_S)
        tg.cancel_scope.cancel()
    assert exit_code in STOPPED_ON_ITS_OWN
    for run in runs:
        assert run.order == ["start"]
    assert "Exception in ASGI application" not in daemon.logs()
