"""The name a client asks for, from the first bytes it sends: the `Host` header of an HTTP/1
request, or the server name (SNI) of a TLS ClientHello. Nothing is answered or changed: the bytes
read are relayed upstream as they came. No name (another protocol, a ClientHello without SNI, an
address as Host) is None, and the connection is then judged by its address alone, as E2B does."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import TYPE_CHECKING

import httptools

if TYPE_CHECKING:
    from collections.abc import Callable

# A ClientHello with post-quantum key shares is about 1.8 KiB and a request head a few KiB: more
# than this before the name shows is not a client worth waiting for.
MAX_PEEK = 64 * 1024
# How long a client may take to send its first bytes; a server-speaks-first protocol on these
# ports waits this long, then is judged by its address.
PEEK_TIMEOUT_S = 10
RECORD_HEADER = 5
HANDSHAKE = 22
CLIENT_HELLO = 1
SERVER_NAME = 0
HOST_NAME = 0


class _Incomplete(Exception):
    """More bytes are needed."""


def _as_name(text: str) -> str | None:
    """A host name, or None for an address literal or nothing."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return text or None
    return None


def http_host(data: bytes) -> str | None:
    """The Host of the request whose head `data` starts with (port left out).

    Raises:
        _Incomplete: the head has not ended yet.
    """
    hosts: list[bytes] = []
    done: list[bool] = []

    class Head:
        def on_header(self, name: bytes, value: bytes) -> None:
            if not done and name.lower() == b"host":
                hosts.append(value)

        def on_headers_complete(self) -> None:
            done.append(True)

    try:
        httptools.HttpRequestParser(Head()).feed_data(data)
    except httptools.HttpParserUpgrade:
        pass  # the head was read whole
    except httptools.HttpParserError:
        if not done:  # past the head, what follows is the upstream server's to judge
            return None
    if not done:
        raise _Incomplete
    if len(hosts) != 1:  # none, or two that a server might choose between differently
        return None
    host = hosts[0].decode("ascii", "replace")
    if host.startswith("["):  # an IPv6 literal, with or without a port
        return None
    return _as_name(host.rsplit(":", 1)[0])


def _take(data: bytes, at: int, size: int) -> tuple[bytes, int]:
    if at + size > len(data):
        raise ValueError("truncated")
    return data[at : at + size], at + size


def _length(data: bytes, at: int, size: int) -> tuple[int, int]:
    raw, at = _take(data, at, size)
    return int.from_bytes(raw, "big"), at


def _handshake(data: bytes) -> bytes:
    """The handshake bytes of the records `data` starts with (a ClientHello may span several).

    Raises:
        _Incomplete: the first handshake message has not arrived whole.
        ValueError: not TLS handshake records.
    """
    handshake, at = b"", 0
    while True:
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            return handshake
        if len(data) < at + RECORD_HEADER:
            raise _Incomplete
        if data[at] != HANDSHAKE:
            raise ValueError("not a handshake record")
        size = int.from_bytes(data[at + 3 : at + 5], "big")
        if len(data) < at + RECORD_HEADER + size:
            raise _Incomplete
        handshake += data[at + RECORD_HEADER : at + RECORD_HEADER + size]
        at += RECORD_HEADER + size


def tls_server_name(data: bytes) -> str | None:
    """The SNI host name of the ClientHello `data` starts with (RFC 8446 4.1.2, RFC 6066 3).

    Raises:
        _Incomplete: the ClientHello has not arrived whole.
    """
    try:
        hello = _handshake(data)
        if hello[0] != CLIENT_HELLO:
            return None
        at = 4 + 2 + 32  # type and length; legacy_version, random
        for size in (1, 2, 1):  # session id, cipher suites, compression methods
            length, at = _length(hello, at, size)
            _, at = _take(hello, at, length)
        end, at = _length(hello, at, 2)
        end += at
        while at < end:
            kind, at = _length(hello, at, 2)
            length, at = _length(hello, at, 2)
            body, at = _take(hello, at, length)
            if kind == SERVER_NAME:
                return _server_name(body)
    except ValueError:
        return None
    return None


def _server_name(body: bytes) -> str | None:
    end, at = _length(body, 0, 2)
    while at < 2 + end:
        kind, at = _length(body, at, 1)
        length, at = _length(body, at, 2)
        name, at = _take(body, at, length)
        if kind == HOST_NAME:
            return _as_name(name.decode("ascii", "replace"))
    return None


async def read_name(reader: asyncio.StreamReader, tls: bool) -> tuple[str | None, bytes]:
    """Read from `reader` until the name shows (or cannot): (the name or None, the bytes read)."""
    parse: Callable[[bytes], str | None] = tls_server_name if tls else http_host
    data = b""
    try:
        async with asyncio.timeout(PEEK_TIMEOUT_S):
            while len(data) < MAX_PEEK:
                chunk = await reader.read(MAX_PEEK - len(data))
                if not chunk:
                    break
                data += chunk
                try:
                    return parse(data), data
                except _Incomplete:
                    continue
    except TimeoutError:
        pass
    return None, data
