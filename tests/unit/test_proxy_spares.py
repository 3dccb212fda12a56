"""A gateway's spare connections to node proxies (sandboxd.cluster.proxy_spares) against a real
TCP server on loopback: a connect takes the spare dialed before it (the server accepted it
before the connect was asked for) and a new one is dialed for the next; a spare the server
closed is not handed out, a new connection is; an address nothing listens on raises OSError
and leaves no spare."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest

from sandboxd.cluster.proxy_spares import ProxySpares

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.anyio


class Server:
    """Accepts on a loopback port; keeps each connection's writer in order of accept."""

    def __init__(self) -> None:
        self.accepted: list[asyncio.StreamWriter] = []
        self.arrived = asyncio.Condition()

    async def on_connection(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self.arrived:
            self.accepted.append(writer)
            self.arrived.notify_all()

    async def accepts(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.accepted) >= count)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, int]]:
    served = Server()
    listening = await asyncio.start_server(served.on_connection, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    yield served, port
    listening.close()
    for writer in served.accepted:
        writer.close()


def local_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


async def test_a_connect_takes_the_spare_and_another_is_dialed(server: tuple[Server, int]) -> None:
    served, port = server
    spares = ProxySpares()
    spares.prepare("127.0.0.1", port)
    await served.accepts(1)  # the spare, before anything asked for a connection
    sock = await spares.connect("127.0.0.1", port)
    assert local_port(sock) == served.accepted[0].get_extra_info("peername")[1]
    await served.accepts(2)  # the next one's spare
    nxt = await spares.connect("127.0.0.1", port)
    assert local_port(nxt) == served.accepted[1].get_extra_info("peername")[1]
    sock.close()
    nxt.close()
    spares.close()


async def test_a_spare_the_server_closed_is_not_handed_out(server: tuple[Server, int]) -> None:
    served, port = server
    spares = ProxySpares()
    spares.prepare("127.0.0.1", port)
    await served.accepts(1)
    served.accepted[0].close()
    await served.accepted[0].wait_closed()
    sock = await spares.connect("127.0.0.1", port)
    try:
        # Two more: the connection dialed in the closed spare's stead, and the next spare
        # (dialed in the background meanwhile: either may be accepted first).
        await served.accepts(3)
        accepted_ports = {w.get_extra_info("peername")[1] for w in served.accepted[1:]}
        assert local_port(sock) in accepted_ports  # a new connection, not the closed one
        sock.setblocking(True)
        sock.sendall(b"x")  # open: the server's side has it
    finally:
        sock.close()
        spares.close()


async def test_nothing_listening_raises_and_leaves_no_spare() -> None:
    with socket.socket() as probe:  # a port just freed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spares = ProxySpares()
    with pytest.raises(ConnectionRefusedError):
        await spares.connect("127.0.0.1", port)
    with pytest.raises(ConnectionRefusedError):  # the spare's dial failed too: none was kept
        await spares.connect("127.0.0.1", port)
    spares.close()
