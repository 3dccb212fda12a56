"""The shape of E2B's code interpreter template, shared by the systemd template tests (plain
HTTP in tests/builds, the Python SDK here; the JS suite writes the same in its own language): a
server on the code interpreter's port, importing the fake index's package, run by a systemd unit
that restarts it."""

from __future__ import annotations

PORT = 49999  # the code interpreter's
SERVER = f"""import http.server
import fake_internet_hello


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = fake_internet_hello.GREETING.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("", {PORT}), Hello).serve_forever()
"""
UNIT = """[Unit]
Description=the template's server

[Service]
ExecStart=/opt/venv/bin/python /opt/server.py
Restart=always
RestartSec=100ms
"""
