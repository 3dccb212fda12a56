"""The sending half of bench.sandbox_network's throughput pair, run as `python3 -c TEXT ADDRESS
PORT BYTES` (inside a sandbox, or in a namespace on the host): sends BYTES of zeros in 1 MiB
writes, half-closes, and prints the seconds from connect until the sink's answer (the count it
read, which must be BYTES) arrived."""

from __future__ import annotations

import socket
import sys
import time

address, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
chunk = bytes(1 << 20)
begin = time.perf_counter()
with socket.create_connection((address, port), timeout=60) as s:
    left = size
    while left > 0:
        s.sendall(chunk[: min(left, len(chunk))])
        left -= len(chunk)
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while part := s.recv(64):
        answer += part
elapsed = time.perf_counter() - begin
if int(answer) != size:
    sys.exit(f"the sink read {answer!r} of {size} bytes")
sys.stdout.write(f"{elapsed}\n")
