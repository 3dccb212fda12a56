"""The client of bench.domain_proxy, run as `python3 -c TEXT ADDRESS HOST COUNT` (inside a
sandbox): COUNT times in a row, a new TCP connection to ADDRESS:80 and one GET / asking for
HOST, read to the end of the answer's body. Prints JSON: the seconds each took, from before the
connect to the body's last byte, and the address of the echo server that answered (the last
time). The address is given, not resolved: DNS is no part of what is measured."""

from __future__ import annotations

import json
import socket
import sys
import time

address, host, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
request = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


def read_more(s: socket.socket, so_far: bytes) -> bytes:
    more = s.recv(65536)
    if not more:
        sys.exit(f"closed after {so_far!r}")
    return so_far + more


seconds, echo = [], {}
for _ in range(count):
    begin = time.perf_counter()
    with socket.create_connection((address, 80), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer = read_more(s, answer)
        head, body = answer.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        while len(body) < length:
            body = read_more(s, body)
    seconds.append(time.perf_counter() - begin)
    echo = json.loads(body)
    if not head.startswith(b"HTTP/1.1 200") or echo["host"] != host:
        sys.exit(f"unexpected answer: {head!r} {body!r}")
sys.stdout.write(json.dumps({"seconds": seconds, "server": echo["server"]}) + "\n")
