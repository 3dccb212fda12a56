"""The domain proxy's listener: one TCP socket in serve's network namespace that sandboxes'
redirected connections arrive at. Each connection is matched to its sandbox by its source
address, its original destination read back from the redirect (SO_ORIGINAL_DST), its name sniffed,
and then relayed to what the verdict names or closed at once: a refused connection is accepted and
closed, as E2B's is. The proxy's direct connections carry `firewall.PROXY_MARK`, so the kernel
also refuses them the host's own addresses (firewall.py's `output` chain); a sandbox with an
`egressProxy` has its connections opened through that SOCKS5 server instead (tunnel.py). A
sandbox holds at most MAX_CONNECTIONS_PER_SANDBOX connections here at once; more are closed as
they arrive, so that one sandbox's idle connections cannot spend serve's open files."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from typing import TYPE_CHECKING

import dns.asyncresolver
import dns.exception
import dns.resolver
from python_socks import ProxyError

from sandboxd.network import firewall
from sandboxd.network.egress_proxy.policy import SandboxRules, Verdict, decide, networks, usable
from sandboxd.network.egress_proxy.sniff import read_name
from sandboxd.network.egress_proxy.tunnel import open_through

if TYPE_CHECKING:
    from sandboxd.network.slots import NetSlot, NetworkPool

log = logging.getLogger("sandboxd.network.egress_proxy")

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
TLS_PORTS = frozenset({443})  # E2B's: 443 is read as TLS, 80 as HTTP (firewall.PROXIED_PORTS)
Upstream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
DIAL_TIMEOUT_S = 30
RESOLVE_TIMEOUT_S = 10
RELAY_CHUNK = 64 * 1024
# Each costs serve two open files (the sandbox's side and upstream) and its buffers. A browser
# keeps at most 256 sockets open in all (Chromium's pool), far more than a sandbox's tools need.
MAX_CONNECTIONS_PER_SANDBOX = 256


def _resolver(dns_address: str | None) -> dns.asyncresolver.Resolver:
    """The proxy resolves names itself: at the pool's resolver (`serve --dns`), else at serve's
    own (/etc/resolv.conf); answers cached for their TTL."""
    resolver = dns.asyncresolver.Resolver(configure=dns_address is None)
    if dns_address is not None:
        resolver.nameservers = [dns_address]
    resolver.cache = dns.resolver.Cache()
    return resolver


class EgressProxy:
    """The proxy and its view of each domain-ruled sandbox's rules, by the sandbox's address."""

    def __init__(self, pool: NetworkPool) -> None:
        """Bind the listener (a port of the kernel's choosing, on every address: only
        connections from a sandbox's address to its own gateway are served)."""
        self.pool = pool
        self._never = firewall.never_reachable(pool.cidr)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("0.0.0.0", 0))  # every address: see the docstring
        self.port: int = self._sock.getsockname()[1]
        self._rules: dict[ipaddress.IPv4Address, SandboxRules] = {}
        self._resolver: dns.asyncresolver.Resolver | None = None
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._held: dict[str, int] = {}  # open connections by source address

    def set_rules(self, slot: NetSlot, egress: firewall.Egress) -> None:
        """The sandbox's rules from now on (none: its connections are closed)."""
        rules = SandboxRules(ipaddress.IPv4Address(slot.host_ip), networks(egress.allow),
                             networks(egress.deny), egress.domains, egress.tunnel)  # fmt: skip
        self.restore(slot, rules if egress.domains or egress.tunnel else None)

    def forget(self, slot: NetSlot) -> None:
        self.restore(slot, None)

    def rules_of(self, slot: NetSlot) -> SandboxRules | None:
        return self._rules.get(ipaddress.IPv4Address(slot.sandbox_ip))

    def restore(self, slot: NetSlot, rules: SandboxRules | None) -> None:
        """Put back what `rules_of` gave."""
        address = ipaddress.IPv4Address(slot.sandbox_ip)
        if rules is None:
            self._rules.pop(address, None)
        else:
            self._rules[address] = rules

    async def start(self) -> None:
        self._sock.listen(1024)
        self._server = await asyncio.start_server(self._serve, sock=self._sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        source = writer.get_extra_info("peername")[0]
        held = self._held.get(source, 0)
        if held >= MAX_CONNECTIONS_PER_SANDBOX:
            writer.transport.abort()
            return
        if held + 1 == MAX_CONNECTIONS_PER_SANDBOX:
            log.warning("egress: %s holds %d connections: more are closed until some end",
                        source, MAX_CONNECTIONS_PER_SANDBOX)  # fmt: skip
        self._held[source] = held + 1
        self._open.add(writer)
        try:
            upstream = await self._upstream(reader, writer)
            if upstream is not None:
                await _relay(reader, writer, *upstream)
        except OSError as exc:
            log.debug("egress connection ended: %s", exc)
        finally:
            self._open.discard(writer)
            writer.transport.abort()
            self._release(source)

    def _release(self, source: str) -> None:
        held = self._held.pop(source) - 1
        if held:
            self._held[source] = held

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes] | None:
        """The connection upstream with the bytes already read from the client, or None when
        the connection is refused."""
        sock = writer.get_extra_info("socket")
        source = ipaddress.IPv4Address(writer.get_extra_info("peername")[0])
        local = ipaddress.IPv4Address(writer.get_extra_info("sockname")[0])
        rules = self._rules.get(source)
        if rules is None or local != rules.gateway:  # not a redirected sandbox connection
            return None
        packed = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        port = int.from_bytes(packed[2:4], "big")
        destination = ipaddress.IPv4Address(packed[4:8])
        if not usable(destination, self._never):  # the redirect skips these: never the proxy
            return None
        name, first = None, b""
        if rules.domains and port in firewall.PROXIED_PORTS:  # a tunnel brings every port
            name, first = await read_name(reader, tls=port in TLS_PORTS)
        verdict = decide(rules, destination, name)
        log.debug("egress %s -> %s:%d (%s): %s", source, destination, port, name, verdict)
        try:
            upstream = await self._connect(rules, verdict, port)
        except (OSError, ProxyError) as exc:
            log.debug("egress %s:%d: %s", verdict, port, exc)
            return None
        return None if upstream is None else (*upstream, first)

    async def _connect(self, rules: SandboxRules, verdict: Verdict, port: int) -> Upstream | None:
        """The connection the verdict allows: through the sandbox's tunnel, or to the address
        (the name's addresses in turn); None when there is none to open."""
        if rules.tunnel is not None and (verdict.address or verdict.name):
            server = await self._tunnel_server(rules.tunnel.host)
            if server is None:
                return None
            target = verdict.name or str(verdict.address)
            return await open_through(rules.tunnel, server, target, port, DIAL_TIMEOUT_S)
        if verdict.address is not None:
            addresses = [verdict.address]
        elif verdict.name is not None:
            addresses = await self._resolve(verdict.name)
        else:
            return None
        for address in addresses:
            try:
                return await _dial(address, port)
            except OSError as exc:
                log.debug("egress %s:%d: %s", address, port, exc)
        return None

    async def _tunnel_server(self, host: str) -> ipaddress.IPv4Address | None:
        """The SOCKS server's address, never one always denied: python-socks dials it from a
        socket of its own, which the `output` chain's mark does not cover."""
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            return next(iter(await self._resolve(host)), None)
        return address if usable(address, self._never) else None

    async def _resolve(self, name: str) -> list[ipaddress.IPv4Address]:
        """The name's IPv4 addresses the proxy may dial (none: refused)."""
        try:  # made at first use: serve's resolv.conf may be missing, and is read only then
            self._resolver = self._resolver or _resolver(self.pool.dns)
            answer = await self._resolver.resolve(name, "A", lifetime=RESOLVE_TIMEOUT_S)
        except dns.exception.DNSException as exc:
            log.debug("egress: %s does not resolve: %s", name, exc)
            return []
        found = [ipaddress.IPv4Address(record.address) for record in answer]
        allowed = [a for a in found if usable(a, self._never)]
        if len(allowed) < len(found):
            log.warning("egress: %s resolves to an address always denied (%s)", name,
                        ", ".join(str(a) for a in found if a not in allowed))  # fmt: skip
        return allowed


async def _dial(address: ipaddress.IPv4Address, port: int) -> Upstream:
    """Connect to `address:port` as the proxy (marked: see the module's docstring)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, firewall.PROXY_MARK)
        sock.setblocking(False)
        async with asyncio.timeout(DIAL_TIMEOUT_S):
            await asyncio.get_running_loop().sock_connect(sock, (str(address), port))
    except (OSError, TimeoutError):
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    first: bytes,
) -> None:
    """Both ways until both ends are done; an end closing its side is passed on (half-close),
    an error on either cuts both."""
    try:
        up_writer.write(first)
        await asyncio.gather(_pump(client_reader, up_writer), _pump(up_reader, client_writer))
    finally:
        up_writer.transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(RELAY_CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        with contextlib.suppress(OSError):
            writer.write_eof()
