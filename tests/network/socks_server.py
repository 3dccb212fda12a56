"""The fake internet's SOCKS5 server (RFC 1928 CONNECT with RFC 1929 username and password), run
by servers.py inside `internet`: it connects out from its own address, so the echo servers name
it as the client, and it appends each CONNECT it is asked for to a log (one JSON line: how the
target was given, `domain` or `ipv4`, its host and port), so a test sees what went through it."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any, ClassVar

VERSION, USERPASS, NO_METHOD = 5, 2, 0xFF
IPV4, DOMAIN = 1, 3
SUCCEEDED, REFUSED = 0, 5


class Socks5(socketserver.StreamRequestHandler):
    config: ClassVar[dict[str, Any]] = {}  # address, username, password, log, names

    def handle(self) -> None:
        _, count = self.rfile.read(2)
        if USERPASS not in self.rfile.read(count):
            self.wfile.write(bytes([VERSION, NO_METHOD]))
            return
        self.wfile.write(bytes([VERSION, USERPASS]))
        _, size = self.rfile.read(2)
        user = self.rfile.read(size).decode()
        password = self.rfile.read(self.rfile.read(1)[0]).decode()
        good = (user, password) == (self.config["username"], self.config["password"])
        self.wfile.write(bytes([1, 0 if good else 1]))
        if not good:
            return
        _, _command, _, kind = self.rfile.read(4)
        if kind == IPV4:
            host = socket.inet_ntoa(self.rfile.read(4))
        else:
            host = self.rfile.read(self.rfile.read(1)[0]).decode()
        port = int.from_bytes(self.rfile.read(2), "big")
        with open(self.config["log"], "a") as log:
            log.write(json.dumps({"kind": "ipv4" if kind == IPV4 else "domain", "host": host,
                                  "port": port}) + "\n")  # fmt: skip
        address = self.config["names"].get(host, host)
        try:
            upstream = socket.create_connection(
                (address, port), timeout=30, source_address=(self.config["address"], 0)
            )
        except OSError:
            self.wfile.write(bytes([VERSION, REFUSED, 0, IPV4]) + bytes(6))
            return
        self.wfile.write(bytes([VERSION, SUCCEEDED, 0, IPV4]) + bytes(6))
        with upstream:
            other = threading.Thread(target=_copy, args=(upstream, self.connection), daemon=True)
            other.start()
            _copy(self.connection, upstream)
            other.join()


def _copy(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)


class Socks5Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def socks_server(config: dict[str, Any]) -> Socks5Server:
    """The server, bound to the config's address and port 1080 (not yet serving)."""
    Socks5.config = config
    Path(config["log"]).touch()
    return Socks5Server((config["address"], 1080), Socks5)
