"""Memory after a burst of connections: what thousands of closed connections held goes back to
the kernel once they are gone (envd/memory.py)."""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING

import anyio
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import SocketStream

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio

CONNECTIONS = 4000
CONNECTING_AT_ONCE = 400  # under the listen backlog, so no SYN waits for a retry
HEALTH = b"GET /health HTTP/1.1\r\nHost: envd\r\n\r\n"
# Measured on glibc (47 MiB before, 83 MiB with the connections open): without the trim a
# quarter of the growth came back (75 MiB), with it 70 % (57 MiB); the rest is CPython's
# small-object arenas, each kept by a few live objects.
GIVEN_BACK_AT_LEAST = 0.5
POLL_S = 0.2  # RSS is read from /proc: often enough to see the trim, rarely enough to be cheap


def _raise_descriptor_limit(wanted: int) -> None:
    """Room for both ends of every connection, here and in the daemon (which inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"needs {wanted} descriptors, the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _settled_rss(daemon: EnvdProcess) -> int:
    """The daemon's RSS once its start-up work is done: two readings a poll apart agree."""
    last, now = -1, daemon.rss_bytes()
    while now != last:
        await anyio.sleep(POLL_S)
        last, now = now, daemon.rss_bytes()
    return now


async def _open_with_request(port: int, gate: anyio.Semaphore) -> SocketStream:
    async with gate:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await stream.send(HEALTH)
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive()
    assert head.startswith(b"HTTP/1.1 204")
    return stream


async def test_rss_comes_back_after_connections_close(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    _raise_descriptor_limit(3 * CONNECTIONS)
    daemon = envd_factory()
    before = await _settled_rss(daemon)
    streams: list[SocketStream] = []
    gate = anyio.Semaphore(CONNECTING_AT_ONCE)

    async def one() -> None:
        streams.append(await _open_with_request(daemon.port, gate))

    async with anyio.create_task_group() as tg:
        for _ in range(CONNECTIONS):
            tg.start_soon(one)
    held = daemon.rss_bytes()
    for stream in streams:
        await stream.aclose()
    grown = held - before
    assert grown > 10 * 1024 * 1024, "the burst should cost memory, or this test shows nothing"
    # Waits for the memory itself: on a busy machine the trims run late (bench.connection_memory
    # times them), and a daemon that never gives it back fails on the test's timeout.
    while (held - daemon.rss_bytes()) < GIVEN_BACK_AT_LEAST * grown:
        await anyio.sleep(POLL_S)
