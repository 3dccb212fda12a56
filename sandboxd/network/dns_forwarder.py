"""sandboxd's DNS forwarder: what sandboxes ask their gateway's port 53 (redirected here by the
firewall's `prerouting`, sandboxd.network.firewall) relayed as it is to the upstream resolvers, and
each answer back. Messages are relayed whole, never parsed (but for the ID an answer must
share with its query): the resolver a sandbox reaches is serve's own, whatever it answers.

It listens on the wildcard address at ports of its own (UDP and TCP), so that it is reached on
every sandbox's gateway address without one socket per sandbox, and it answers only sources in
the pool (the firewall also refuses the ports from any interface that is not a sandbox's, and
to a sandbox denied everything).
A query that no upstream answers gets no answer: the sandbox's resolver retries, as it would
with an unreachable server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger("sandboxd.network.dns_forwarder")

DNS_PORT = 53
RESOLV_CONF = Path("/etc/resolv.conf")
UPSTREAM_TIMEOUT_S = 2.0  # per upstream; a resolver inside gives up on a server after 5 s
TCP_IDLE_S = 10.0  # a TCP client that sends nothing for this long is dropped (RFC 7766 §6.2.3)
MAX_PENDING = 1024  # UDP queries relayed at once; more are dropped (their clients retry)
MAX_TCP_CLIENTS = 256  # TCP connections at once; more are closed (their resolvers use UDP first)
HEADER = 12  # a DNS message's fixed header, whose first two bytes are its ID


def host_nameservers(resolv_conf: Path = RESOLV_CONF) -> list[str]:
    """The nameservers serve's own resolver uses (loopback ones too: the forwarder runs where
    serve does). None listed: 127.0.0.1, as for glibc."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for line in resolv_conf.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver":
                with contextlib.suppress(ValueError):
                    found.append(str(ipaddress.ip_address(words[1])))
    return found or ["127.0.0.1"]


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class DnsForwarder:
    """Bound at construction (so the firewall can be told its ports before the event loop
    runs); relaying from `start` to `close`."""

    def __init__(self, pool: ipaddress.IPv4Network, upstreams: Sequence[str]) -> None:
        self.pool = pool
        self.upstreams = list(upstreams)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.udp.bind(("0.0.0.0", 0))  # every gateway; sources checked below
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("0.0.0.0", 0))
        self.tcp.listen(128)
        for sock in (self.udp, self.tcp):
            sock.setblocking(False)
        self._transport: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._tcp_clients = 0

    @property
    def offered(self) -> list[tuple[str, int]]:
        """(protocol, port) of its sockets, for the firewall."""
        return [("udp", self.udp.getsockname()[1]), ("tcp", self.tcp.getsockname()[1])]

    def _allowed(self, source: str) -> bool:
        try:
            return ipaddress.ip_address(source) in self.pool
        except ValueError:
            return False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _UdpFront(self), sock=self.udp
        )
        self._server = await asyncio.start_server(self._serve_tcp, sock=self.tcp)
        log.info("DNS forwarder on ports %s to %s", self.offered, ", ".join(self.upstreams))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._transport is not None:
            self._transport.close()
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        self.udp.close()
        self.tcp.close()

    def relay_udp(self, query: bytes, client: tuple[str, int]) -> None:
        if not self._allowed(client[0]) or len(query) < HEADER or len(self._pending) >= MAX_PENDING:
            return
        task = asyncio.ensure_future(self._answer_udp(query, client))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _answer_udp(self, query: bytes, client: tuple[str, int]) -> None:
        for upstream in self.upstreams:
            try:
                answer = await asyncio.wait_for(_ask_udp(upstream, query), UPSTREAM_TIMEOUT_S)
            except (OSError, TimeoutError):
                continue
            if self._transport is not None:
                self._transport.sendto(answer, client)
            return
        log.debug("no upstream answered a query from %s", client[0])

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """RFC 7766: queries prefixed with their length, one after another on the connection;
        each relayed over a connection of its own to an upstream."""
        self._tcp_clients += 1
        try:
            if self._tcp_clients > MAX_TCP_CLIENTS:
                return
            if not self._allowed(writer.get_extra_info("peername")[0]):
                return
            while True:
                size = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), TCP_IDLE_S))
                query = await asyncio.wait_for(reader.readexactly(size), TCP_IDLE_S)
                answer = await self._ask_upstreams_tcp(query)
                if answer is None:
                    return
                writer.write(len(answer).to_bytes(2, "big") + answer)
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or went quiet
        finally:
            self._tcp_clients -= 1
            writer.close()

    async def _ask_upstreams_tcp(self, query: bytes) -> bytes | None:
        for upstream in self.upstreams:
            try:
                return await asyncio.wait_for(_ask_tcp(upstream, query), UPSTREAM_TIMEOUT_S)
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                continue
        return None


class _UdpFront(asyncio.DatagramProtocol):
    def __init__(self, forwarder: DnsForwarder) -> None:
        self.forwarder = forwarder

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.forwarder.relay_udp(data, addr)


async def _ask_udp(upstream: str, query: bytes) -> bytes:
    """The upstream's answer to `query`, from a socket of its own (a fresh source port per
    query, as a resolver's), skipping datagrams that are not the answer to it."""
    loop = asyncio.get_running_loop()
    with socket.socket(_family(upstream), socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect((upstream, DNS_PORT))  # only the upstream's datagrams arrive
        await loop.sock_sendall(sock, query)
        while True:
            answer = await loop.sock_recv(sock, 65535)
            if len(answer) >= HEADER and answer[:2] == query[:2]:
                return answer


async def _ask_tcp(upstream: str, query: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(upstream, DNS_PORT)
    try:
        writer.write(len(query).to_bytes(2, "big") + query)
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(2))
        return await reader.readexactly(size)
    finally:
        writer.close()
