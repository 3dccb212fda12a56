"""The least a user-space relay can do: one client connection, its bytes sent on to a connected
upstream socket and the upstream's bytes back, each direction a blocking loop of 1 MiB
`recv_into` and `sendall` (no HTTP parsing, no event loop, no Python per byte). What it reaches
is the ceiling for sandboxd's proxy on the same machine: the copies into and out of user space
and the loopback sends are all that is left of a relay's work.

Run by bench.sandbox_proxy: python -m bench.copy_relay LISTEN_FD UPSTREAM_FD (inherited fds);
serves one connection and exits when the client has closed it.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading

BUFFER = 1 << 20


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends or either side fails, then end `sink`'s sending side."""
    buffer = bytearray(BUFFER)
    view = memoryview(buffer)
    with contextlib.suppress(OSError):  # a side reset: the relay ends as a connection would
        while count := source.recv_into(buffer):
            sink.sendall(view[:count])
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def main() -> None:
    listener = socket.socket(fileno=int(sys.argv[1]))
    upstream = socket.socket(fileno=int(sys.argv[2]))
    upstream.setblocking(True)
    client, _ = listener.accept()
    up = threading.Thread(target=pump, args=(client, upstream))
    up.start()
    pump(upstream, client)  # the response; the client closes once it has all of it
    up.join()


if __name__ == "__main__":
    main()
