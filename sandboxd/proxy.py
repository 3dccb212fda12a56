"""The sandbox proxy: HTTP requests for a port inside a sandbox, streamed there and back
(control-api.md §1.4).

It is a small HTTP/1.1 relay of its own (sandboxd/upstream.py) rather than httpx or httpcore:
those would add h11, httpcore and certifi to the one pyproject that also installs envd into
every sandbox, parse every body byte again in pure Python (h11), and hide the transports that
`cut` must abort. httptools is already envd's parser.

What the relay does per request: the routing rules of sandboxd/routing.py; envd's
orchestrator-only paths refused; a kept-alive connection to the port taken or made; hop-by-hop
headers and the API key left out; the request body streamed up while the response streams
back, chunk by chunk as it arrives; the client leaving aborts the upstream connection, so the
sandbox's server sees it leave too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from sandboxd.routing import (
    RouteError,
    SandboxLookup,
    Target,
    headers_of,
    honours_headers,
    is_envd_control_path,
    is_sandbox_host,
    resolve,
    signed_files_query,
    target_by_signature,
)
from sandboxd.upstream import UpstreamClosed, UpstreamConnection, UpstreamPool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, MutableMapping

    from sandboxd.runtime import Box, Runtime
    from sandboxd.upstream import Exchange

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("sandboxd.proxy")

# RFC 9110 §7.6.1 (plus the obsolete Proxy-Connection and Keep-Alive); the framing headers are
# set again for each side. `expect` is answered here: uvicorn sends the 100 Continue itself.
HOP_BY_HOP = frozenset(
    (b"connection", b"proxy-connection", b"keep-alive", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate",
     b"expect")
)  # fmt: skip
NEVER_FORWARDED = frozenset((b"x-api-key",))  # the control API's key stays with sandboxd


def is_sandbox_request(scope: Mapping[str, Any], domain: str, lookup: SandboxLookup) -> bool:
    """Whether sandboxd's top-level app hands this request to the proxy rather than the
    control API: routing headers on a host that honours them, a `{port}-{id}.{domain}` host, or
    a header-less signed `/files` URL that one sandbox's token signed."""
    if scope.get("type") != "http":
        return False
    headers = headers_of(scope)
    host = headers.get(b"host", b"").decode("latin-1")
    if is_sandbox_host(host, domain):
        return True
    if not honours_headers(host, domain):
        return False
    if b"e2b-sandbox-id" in headers or b"e2b-sandbox-port" in headers:
        return True
    return signed_files_query(scope) is not None and (
        target_by_signature(scope, lookup) is not None
    )


class SandboxProxy:
    """ASGI app: every request it gets goes to a port inside a sandbox, or is answered with
    E2B's proxy errors. `runtime` is the Runtime whose boxes `lookup` hands out."""

    def __init__(self, lookup: SandboxLookup, runtime: Runtime, domain: str = "localhost") -> None:
        self.lookup = lookup
        self.runtime = runtime
        self.domain = domain
        self.pool = UpstreamPool()

    def cut(self, sandbox_id: str) -> None:
        """End every open proxied connection of the sandbox at transport level (on kill and
        pause): clients see the connection drop, not a clean end of stream."""
        count = self.pool.cut(sandbox_id)
        if count:
            log.debug("sandbox %s: cut %d proxied connections", sandbox_id, count)

    def close(self) -> None:
        self.pool.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets are the top-level app's
        try:
            target = resolve(scope, self.domain, self.lookup)
        except RouteError as exc:
            await _plain(send, 400, str(exc))
            return
        if is_envd_control_path(target, scope["path"]):
            await _plain(send, 404, "404 page not found")
            return
        box = self.lookup.running_box(target.sandbox_id)
        if box is None:
            await _sandbox_not_found(send, target)
            return
        await _Relay(self, box, target, scope, receive, send).run()


class _Relay:
    """One proxied request and its response."""

    def __init__(
        self, proxy: SandboxProxy, box: Box, target: Target, scope: Scope,
        receive: Receive, send: Send,
    ) -> None:  # fmt: skip
        self.proxy, self.box, self.target = proxy, box, target
        self.scope, self.receive, self.send = scope, receive, send
        self.client_gone = False
        self.body_sent = False  # the whole request body is with the sandbox
        self.headers, self.framing = _request_headers(scope, target)

    async def run(self) -> None:
        connection = await self._connection()
        if connection is None:
            return
        pump: asyncio.Task[None] | None = None
        try:
            exchange = connection.start(self._head(), self.scope["method"] == "HEAD")
            pump = asyncio.ensure_future(self._pump_body(connection))
            try:
                status, headers = await exchange.head
            except UpstreamClosed:
                await self._upstream_failed(connection)
                return
            await self.send(
                {"type": "http.response.start", "status": status,
                 "headers": _response_headers(headers)}
            )  # fmt: skip
            if await self._stream_response(connection, exchange, pump):
                await self.send({"type": "http.response.body", "body": b""})
        finally:
            if pump is not None and not pump.done():
                pump.cancel()  # the response ended before the request body: do not reuse
                connection.abort()
            self.proxy.pool.release(connection)

    async def _connection(self) -> UpstreamConnection | None:
        pool = self.proxy.pool
        reused = pool.take_idle(self.box.id, self.target.port)
        if reused is not None:
            return reused
        try:
            return await pool.connect(self.box, self.target.port)
        except OSError:
            if self.proxy.lookup.running_box(self.target.sandbox_id) is None:
                await _sandbox_not_found(self.send, self.target)
            else:
                await _port_not_open(self.send, self.target)
            return None

    def _head(self) -> bytes:
        scope = self.scope
        path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            path += b"?" + scope["query_string"]
        lines = [b"%s %s HTTP/1.1" % (scope["method"].encode(), path)]
        lines += [b"%s: %s" % pair for pair in self.headers]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _pump_body(self, connection: UpstreamConnection) -> None:
        """Request body up to the sandbox as the client sends it; then watch for the client
        leaving, which aborts the upstream connection so the sandbox sees it leave."""
        chunked = self.framing == "chunked"
        more = self.framing != "none"
        while more:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._client_left(connection)
                return
            body, more = message.get("body", b""), message.get("more_body", False)
            try:
                if chunked and body:
                    await connection.write(b"%x\r\n%s\r\n" % (len(body), body))
                elif body:
                    await connection.write(body)
                if chunked and not more:
                    await connection.write(b"0\r\n\r\n")
            except UpstreamClosed:
                return  # the response (or its failure) tells the rest
        self.body_sent = True
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self._client_left(connection)

    def _client_left(self, connection: UpstreamConnection) -> None:
        self.client_gone = True
        connection.abort()

    async def _stream_response(
        self, connection: UpstreamConnection, exchange: Exchange, pump: asyncio.Task[None]
    ) -> bool:
        """The response body to the client as it arrives; False when it could not be whole
        (the sandbox cut off, or the client left), so the client's connection must drop."""
        try:
            async for chunk in exchange.body(connection):
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamClosed:
            return False
        if not self.body_sent:
            return True  # an early answer; run() drops the connection
        # Stop watching for the client before the response completes: uvicorn answers a
        # pending receive() with a disconnect once it has, and that must not abort a
        # connection that goes back to the pool.
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        return not self.client_gone

    async def _upstream_failed(self, connection: UpstreamConnection) -> None:
        """The connection ended before a response head: the sandbox went, or the server
        inside dropped the request."""
        if self.client_gone:
            return
        if self.proxy.lookup.running_box(self.target.sandbox_id) is None:
            await _sandbox_not_found(self.send, self.target)
            return
        await _json(
            self.send,
            {"sandboxId": self.target.sandbox_id, "port": self.target.port,
             "message": "The sandbox closed the connection without answering", "code": 502},
        )  # fmt: skip


def _request_headers(scope: Scope, target: Target) -> tuple[list[tuple[bytes, bytes]], str]:
    """Headers for the sandbox, and how the body is framed: "length", "chunked" or "none"."""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    connection_named = _connection_tokens(raw)
    headers: list[tuple[bytes, bytes]] = []
    framing = "none"
    has_host = False
    for name, value in raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            framing = "chunked"
        if lower in HOP_BY_HOP or lower in NEVER_FORWARDED or lower in connection_named:
            continue
        if lower == b"content-length":
            framing = "length"
        has_host = has_host or lower == b"host"
        headers.append((name, value))
    if framing == "chunked":
        headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
        headers.append((b"transfer-encoding", b"chunked"))
    if not has_host:  # HTTP/1.0 clients may send none; HTTP/1.1 requires one
        headers.append((b"host", b"127.0.0.1:%d" % target.port))
    return headers, framing


def _response_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The sandbox's response headers minus hop-by-hop ones (uvicorn frames the body again:
    Content-Length kept, chunked otherwise)."""
    connection_named = _connection_tokens(raw)
    return [
        (name, value)
        for name, value in raw
        if name.lower() not in HOP_BY_HOP and name.lower() not in connection_named
    ]


def _connection_tokens(raw: list[tuple[bytes, bytes]]) -> set[bytes]:
    """Header names the Connection header declares hop-by-hop."""
    tokens: set[bytes] = set()
    for name, value in raw:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


async def _sandbox_not_found(send: Send, target: Target) -> None:
    await _json(
        send,
        {"sandboxId": target.sandbox_id, "message": "The sandbox was not found", "code": 502},
    )


async def _port_not_open(send: Send, target: Target) -> None:
    await _json(
        send,
        {"sandboxId": target.sandbox_id, "message": "The sandbox is running but port is not open",
         "port": target.port, "code": 502},
    )  # fmt: skip


async def _json(send: Send, body: dict[str, object], status: int = 502) -> None:
    await _answer(send, status, b"application/json", json.dumps(body).encode())


async def _plain(send: Send, status: int, text: str) -> None:
    await _answer(send, status, b"text/plain; charset=utf-8", text.encode() + b"\n")


async def _answer(send: Send, status: int, media: bytes, body: bytes) -> None:
    headers = [(b"content-type", media), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
