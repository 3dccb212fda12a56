"""An HTTP server on PORT (the argument) answering every GET with the Host it was asked for,
as JSON: what a sandbox's own server sees through sandboxd's proxy."""

from __future__ import annotations

import http.server
import json
import sys


class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"host": self.headers.get("Host")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), Echo).serve_forever()
