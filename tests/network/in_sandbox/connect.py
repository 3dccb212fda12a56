"""Prints "connected", or the errno a TCP connection to ADDRESS PORT (the arguments) got."""

from __future__ import annotations

import socket
import sys

try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30).close()
    sys.stdout.write("connected\n")
except OSError as e:
    sys.stdout.write(f"{e.errno}\n")
