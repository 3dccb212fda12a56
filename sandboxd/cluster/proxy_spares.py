"""A connection kept ready to each node's proxy port (sandboxd.cluster.routes): a client's new
connection to a sandbox through the gateway, the SDK's first command after its create among
them, takes it instead of waiting for a TCP connect and the node proxy's accept, and another is
dialed in the background for the next. A create recorded through this gateway has one dialed to
its node's proxy at once. A spare the node closed meanwhile (its proxy's keep-alive, 60 s, or a
restart) or older than MAX_AGE_S is dropped and the connection dialed then, as without spares.
A connection that finds the spare still being dialed waits for it rather than dialing a second
one: that dial began earlier, so it is done sooner. A node that cannot be reached gets no spare:
the connections waiting for the failed dial meet its error, later ones dial it themselves."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from typing import Final

# Well within the node proxy's keep-alive (2 x sandboxd.node.remote KEEPALIVE_S), so that a
# spare is never the one the node is closing just as a request goes out on it.
MAX_AGE_S: Final = 20.0

Address = tuple[str, int]


async def dial(host: str, port: int) -> socket.socket:
    """A new connected socket to host:port, without Nagle's delay.

    Raises:
        OSError: the connect failed.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _unused(sock: socket.socket) -> bool:
    """Whether an idle connection is still open with nothing said on it: a node that closed it
    (or reset it) left it readable."""
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


class ProxySpares:
    """One spare connection per node proxy address, in the gateway's event loop."""

    def __init__(self) -> None:
        self._ready: dict[Address, tuple[float, socket.socket]] = {}  # address → (made, socket)
        self._dialing: dict[Address, asyncio.Task[OSError | None]] = {}

    async def connect(self, host: str, port: int) -> socket.socket:
        """A connected socket to the node proxy at host:port: the spare if it is still good,
        else a new one; either way a new spare is dialed meanwhile.

        Raises:
            OSError: the connect failed.
        """
        address = (host, port)
        under_way = self._dialing.get(address)
        if under_way is not None and address not in self._ready:
            failure = await asyncio.shield(under_way)  # a cancelled connect leaves it dialing
            if failure is not None:
                raise failure
        spare = self._ready.pop(address, None)
        self.prepare(host, port)
        if spare is not None:
            made_at, sock = spare
            if time.monotonic() - made_at < MAX_AGE_S and _unused(sock):
                return sock
            sock.close()
        return await dial(host, port)

    def prepare(self, host: str, port: int) -> None:
        """Dial a spare to host:port in the background, unless one is ready or under way."""
        address = (host, port)
        if address not in self._ready and address not in self._dialing:
            loop = asyncio.get_running_loop()
            self._dialing[address] = loop.create_task(self._dial_spare(address))

    async def _dial_spare(self, address: Address) -> OSError | None:
        """The dial's failure, for the connections that waited for it, or None."""
        try:
            sock = await dial(*address)
        except OSError as exc:
            return exc  # unreachable: no spare kept
        finally:
            self._dialing.pop(address, None)
        self._ready[address] = (time.monotonic(), sock)
        return None

    def close(self) -> None:
        """Drop the spares and stop the dials under way."""
        for task in self._dialing.values():
            task.cancel()
        self._dialing.clear()
        for _, sock in self._ready.values():
            with contextlib.suppress(OSError):
                sock.close()
        self._ready.clear()
