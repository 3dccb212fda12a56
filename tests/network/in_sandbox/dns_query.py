"""Prints "answered" when a DNS query for NAME sent to ADDRESS PORT over PROTO ("udp" or "tcp")
gets an answer (NXDOMAIN too: the query reached a resolver), "closed" when a TCP server closes
without one, else the errno the query met. Over UDP it is sent again each second until one of
them comes, as a resolver retries (the kernel sends a refusal's ICMP at a limited rate)."""

from __future__ import annotations

import socket
import struct
import sys

IP_RECVERR = 11  # linux/in.h: a UDP socket hears of every ICMP error, not only "port unreachable"
address, port, proto, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
labels = b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
query = struct.pack(">HHHHHH", 0x5A5A, 0x0100, 1, 0, 0, 0) + labels + struct.pack(">HH", 1, 1)


def over_udp() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.connect((address, port))
        sock.settimeout(1)
        for _ in range(60):
            try:
                sock.send(query)
                sock.recv(65535)
            except TimeoutError:
                continue
            except OSError as e:
                return str(e.errno)
            return "answered"
    return "no answer"


def over_tcp() -> str:
    try:
        with socket.create_connection((address, port), timeout=30) as sock:
            sock.sendall(struct.pack(">H", len(query)) + query)
            return "answered" if sock.recv(2) else "closed"
    except OSError as e:
        return str(e.errno)


sys.stdout.write((over_udp() if proto == "udp" else over_tcp()) + "\n")
