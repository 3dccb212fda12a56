"""The sandbox proxy served for tests and benchmarks: a real uvicorn server with sandboxd's
listener on a free loopback port, in the caller's event loop (the boxes' namespace fds live in
this process), over an in-memory SandboxLookup. Requests for no sandbox get a plain 404 from a
stand-in for the control API, or go to the app a test gives."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import uvicorn

from envd.http.signing import file_signature
from sandboxd.lifecycle.ingress import LOCAL_NODE, Credentials, Ingress, Location
from sandboxd.proxy.connection_policy import ConnectionPolicy
from sandboxd.proxy.listener import Listener
from sandboxd.proxy.relay import SandboxProxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.types import ASGIApp, Receive, Scope, Send

    from sandboxd.runtime.engine import Box


@dataclass
class MemoryLookup:
    """Sandboxes by id, as the lifecycle manager knows them."""

    running: dict[str, Box] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # envd access tokens of secure ones

    def locate(self, sandbox_id: str) -> Location | None:
        box = self.running.get(sandbox_id)
        return None if box is None else Location(LOCAL_NODE, box.dialer)

    async def wake(self, sandbox_id: str, port: int, credentials: Credentials) -> Location | None:
        return None  # none is ever paused: auto-resume is tested through sandboxd serve

    def ingress(self, sandbox_id: str) -> Ingress:
        return Ingress()  # the proxy's ingress rules are tested through sandboxd serve

    def sandbox_for_signature(
        self, path: str, operation: str, username: str, signature: str, expiration: str | None
    ) -> str | None:
        seconds = int(expiration) if expiration and expiration.lstrip("-").isdigit() else None
        for sandbox_id, token in self.tokens.items():
            if file_signature(path, operation, username, token, seconds) == signature:
                return sandbox_id
        return None


CONTROL_API_STAND_IN = b"not the proxy's"


async def control_api_stand_in(scope: Scope, _receive: Receive, send: Send) -> None:
    headers = [(b"content-length", b"%d" % len(CONTROL_API_STAND_IN))]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": CONTROL_API_STAND_IN})


@dataclass
class ServedProxy:
    proxy: SandboxProxy
    lookup: MemoryLookup
    url: str


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp, http: type[asyncio.Protocol] | str) -> AsyncIterator[str]:
    """`app` served by uvicorn with the HTTP protocol `http` on a free loopback port, in the
    caller's event loop; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=http, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def serve_proxy(
    domain: str = "localhost", control_api: ASGIApp = control_api_stand_in
) -> AsyncIterator[ServedProxy]:
    """The proxy, with `control_api` answering the requests for no sandbox."""
    lookup = MemoryLookup()
    proxy = SandboxProxy(lookup, domain=domain)
    try:
        async with serve_app(control_api, Listener.serving(proxy, ConnectionPolicy())) as url:
            yield ServedProxy(proxy, lookup, url)
    finally:
        proxy.close()


async def envd_init(box: Box, body: dict[str, object]) -> int:
    """POST envd's /init inside the sandbox directly, as the orchestrator does (the proxy
    refuses it); returns the status."""
    payload = json.dumps(body).encode()
    reader, writer = await box.dialer.open_connection(49983)
    try:
        writer.write(
            b"POST /init HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        status_line = await reader.readline()
    finally:
        writer.close()
    return int(status_line.split()[1])
