"""The receiving half of bench.sandbox_network's throughput pair: `python3 -m bench.tcp_sink
ADDRESS PORT` listens, reads each connection to its end in 1 MiB reads, answers with the count
of bytes read and closes; one connection at a time, until killed."""

from __future__ import annotations

import socket
import sys


def main() -> None:
    buffer = bytearray(1 << 20)
    with socket.create_server((sys.argv[1], int(sys.argv[2]))) as server:
        while True:
            conn, _ = server.accept()
            with conn:
                count = 0
                while n := conn.recv_into(buffer):
                    count += n
                conn.sendall(str(count).encode())


if __name__ == "__main__":
    main()
