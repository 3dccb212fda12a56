"""The fake internet's servers, one process run inside the `internet` namespace: HTTP on :80
and HTTPS on :443 on every address there, each answering with what identifies the request
(the Host asked for, the address that took the connection, the client's address), except on
the package index's address, which serves the index's files; DNS on one address answering
A records for the test names; and a SOCKS5 server (socks_server.py) on one address.

Run as `python -m tests.network.servers CONFIG.json` (fake_internet.py writes the config); it
creates the config's `ready` file once every socket is bound, and runs until killed.
"""

from __future__ import annotations

import functools
import json
import logging
import signal
import ssl
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

# dnslib rather than a hand-written responder: its zone resolver answers from zone-file
# text, so the whole DNS server is the records plus two constructor calls.
from dnslib.server import DNSLogger, DNSServer
from dnslib.zoneresolver import ZoneResolver

from tests.network.socks_server import socks_server

log = logging.getLogger("fake-internet")


class Echo(SimpleHTTPRequestHandler):
    """Answers any GET with JSON naming the request, so a test sees where it really landed;
    on `index_address`, serves the package index's files instead."""

    protocol_version = "HTTP/1.1"
    index_address: ClassVar[str] = ""

    def do_GET(self) -> None:
        server_ip, server_port = self.connection.getsockname()[:2]
        if server_ip == self.index_address:
            super().do_GET()
            return
        body = json.dumps({
            "host": self.headers.get("Host"),
            "server": server_ip,
            "port": server_port,
            "client": self.client_address[0],
            "path": self.path,
            "tls": isinstance(self.connection, ssl.SSLSocket),
        }).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.client_address[0], format % args)


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that refuses the certificate (as a test without the CA does) ends the
        # handshake: log one line, not a traceback.
        log.info("%s: %s", client_address[0], sys.exception())


class TLSEchoServer(EchoServer):
    def __init__(self, address: tuple[str, int], handler: Any, context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        # The handshake happens on the handler's thread, at its first read: a slow or
        # failing client must not hold up accept().
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address


def serve(config: dict[str, Any]) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config["cert"], config["key"])
    zone = "".join(f"{name}. 60 IN A {address}\n" for name, address in config["names"].items())
    dns = [
        DNSServer(
            ZoneResolver(zone, glob=True),  # `*.name` in a test's names: its subdomains
            address=config["dns"],
            port=53,
            logger=DNSLogger("-request,-reply", prefix=False, logf=log.info),
            tcp=tcp,
        )
        for tcp in (False, True)
    ]
    Echo.index_address = config["index_address"]
    handler = functools.partial(Echo, directory=config["index_root"])
    servers = [
        EchoServer(("0.0.0.0", 80), handler),
        TLSEchoServer(("0.0.0.0", 443), handler, context),
        socks_server({**config["socks"], "names": config["names"]}),
    ]
    for server in [*servers, *(d.server for d in dns)]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    Path(config["ready"]).touch()
    signal.pause()  # SIGTERM's default action ends the process: nothing to flush


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    serve(json.loads(Path(sys.argv[1]).read_text()))
