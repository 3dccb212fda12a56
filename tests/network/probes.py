"""Clients for the fake internet's servers, plain sockets and nothing else: run them inside a
namespace with `NetworkNamespace.call` (from the host's namespace they reach nothing)."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

from dnslib import QTYPE, DNSRecord

if TYPE_CHECKING:
    import ssl

# Only bounds how long a broken network takes to fail a test: answers come in milliseconds.
TIMEOUT_S = 30
RESEND_S = 1  # the route-error limiter's refill: one ICMP error a second (udp_error)
IP_RECVERR = 11  # linux/in.h; Python's socket module has no name for it before 3.14


def get(address: str, name: str, port: int = 80, tls: ssl.SSLContext | None = None) -> Any:
    """GET / from `address:port` asking for `name` (Host header, and SNI with `tls`): the echo
    server's JSON.

    Raises:
        OSError: no connection; ssl.SSLError if the certificate does not verify.
    """
    with socket.create_connection((address, port), timeout=TIMEOUT_S) as raw:
        sock = raw if tls is None else tls.wrap_socket(raw, server_hostname=name)
        with sock:
            sock.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            response = b""
            while chunk := sock.recv(65536):
                response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return json.loads(body)


def resolve(name: str, server: str) -> list[str]:
    """The A records `server` (port 53, UDP) gives for `name`; empty for NXDOMAIN."""
    reply = DNSRecord.parse(DNSRecord.question(name).send(server, 53, timeout=TIMEOUT_S))
    return [str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A]


def connect_error(address: str, port: int) -> OSError | None:
    """The error connecting over TCP to `address:port` gives (None: it connected)."""
    try:
        socket.create_connection((address, port), timeout=TIMEOUT_S).close()
    except OSError as e:
        return e
    return None


def udp_error(address: str, port: int) -> OSError | None:
    """The error a datagram to `address:port` brings back (the ICMP answer); None if something
    answered. A router limits the ICMP errors it sends one peer (a burst of 5, then one a
    second: the kernel's route-error limiter), and a datagram whose error it held back gets
    none ever: so the datagram goes again each second until an error or an answer comes, and
    after TIMEOUT_S the last wait's TimeoutError is the result."""
    query = DNSRecord.question("example.test").pack()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(RESEND_S)
        # Without IP_RECVERR, Linux reports only "port unreachable" to a UDP socket.
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.connect((address, port))
        waited: TimeoutError | None = None
        for _ in range(round(TIMEOUT_S / RESEND_S)):
            try:
                sock.send(query)
                sock.recv(512)
            except TimeoutError as e:
                waited = e
                continue
            except OSError as e:
                return e
            return None
    assert waited is not None
    return waited
