"""E2B's `egressProxy`: a connection the domain proxy allowed, opened through the sandbox's SOCKS5
server instead of directly (python-socks: the SOCKS5 greeting, RFC 1929 credentials and the
CONNECT). A name the sandbox was allowed by is sent as a name (ATYP domain: the SOCKS server
resolves it, as E2B's does); an address as an address."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from python_socks import ProxyType
from python_socks.async_.asyncio import Proxy

if TYPE_CHECKING:
    import ipaddress

    from sandboxd.network.firewall import Tunnel


async def open_through(
    tunnel: Tunnel, server: ipaddress.IPv4Address, host: str, port: int, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to `host:port` through the SOCKS5 server at `server` (the tunnel's host,
    resolved and checked by the caller).

    Raises:
        OSError or python_socks.ProxyError: the server refused or could not connect.
    """
    proxy = Proxy(ProxyType.SOCKS5, str(server), tunnel.port, tunnel.username, tunnel.password,
                  rdns=True)  # fmt: skip
    sock = await proxy.connect(host, port, timeout=timeout_s)
    return await asyncio.open_connection(sock=sock)
