"""The sandbox proxy: HTTP requests for a port inside a sandbox, streamed there and back
(docs/sandboxd.md, "The proxy").

It works below ASGI, on the bytes of sandboxd's listener (sandboxd/proxy/listener.py): an ASGI
message and an await per body chunk cost more than the copy itself, and made the proxy half as
fast as envd. The request's head is rewritten (hop-by-hop headers and the API key left out)
and its body streamed up; the response goes back byte for byte as the sandbox sent it, head and
framing included, with httptools only following where it ends (sandboxd/proxy/upstream.py). Nothing
but bytes and transport writes per chunk; flow control by pausing the side that reads.

It is a small HTTP/1.1 relay of its own rather than httpx or httpcore: those would add h11,
httpcore and certifi to the one pyproject that also installs envd into every sandbox, parse
every body byte again, and hide the transports that `cut` must abort.

Per request: the routing rules of sandboxd/proxy/routing.py; envd's orchestrator-only paths
refused; a sandbox not running woken, or answered, by sandboxd/proxy/waking.py; a kept-alive
connection to the port taken or made; the client leaving aborts the upstream connection, so the
sandbox's server sees it leave too.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from typing import TYPE_CHECKING

from sandboxd.guest.client import ENVD_PORT
from sandboxd.proxy.exchange import (
    Answer,
    Client,
    Exchange,
    Request,
    json_answer,
    plain_answer,
    sandbox_not_found,
)
from sandboxd.proxy.routing import (
    TRAFFIC_TOKEN_HEADER,
    RouteError,
    SandboxLookup,
    Target,
    is_envd_control_path,
    is_sandbox_request,
    resolve,
)
from sandboxd.proxy.upstream import COPY_BELOW, FRAMING_HEADERS, UpstreamConnection, UpstreamPool
from sandboxd.proxy.waking import Waking

if TYPE_CHECKING:
    from sandboxd.lifecycle.ingress import Ingress, Location

log = logging.getLogger("sandboxd.proxy.relay")

# RFC 9110 §7.6.1 (plus the obsolete Proxy-Connection and Keep-Alive); the request's framing is
# set again for the sandbox. `expect` goes through: the sandbox's server answers 100 Continue.
HOP_BY_HOP = frozenset(
    (b"connection", b"proxy-connection", b"keep-alive", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate")
)  # fmt: skip
# The control API's key stays with sandboxd; the cluster's credential is added by a gateway only
# (sandboxd.cluster), never passed on from a client.
CLUSTER_TOKEN_HEADER = b"x-sandboxd-cluster-token"
NEVER_FORWARDED = frozenset((b"x-api-key", CLUSTER_TOKEN_HEADER))
# What a Connection header may not declare hop-by-hop: they frame or route the request.
NEVER_HOP_BY_HOP = frozenset((*FRAMING_HEADERS, b"host"))
# Sent again on a new connection when a kept-alive one closed before any answer (RFC 9110
# §9.2.2); only without a body, which the relay does not keep.
IDEMPOTENT_WITHOUT_BODY = frozenset(("GET", "HEAD", "OPTIONS"))


class SandboxProxy:
    """Turns requests for sandboxes into exchanges; holds the connections into sandboxes."""

    def __init__(self, lookup: SandboxLookup, domain: str = "localhost",
                 cluster_token: str | None = None) -> None:  # fmt: skip
        """`cluster_token`: a gateway's, sent with every request to the nodes' proxies."""
        self.lookup = lookup
        self.domain = domain
        self.added = b"" if cluster_token is None else (
            b"%s: %s\r\n" % (CLUSTER_TOKEN_HEADER, cluster_token.encode()))  # fmt: skip
        self.pool = UpstreamPool()
        self.waking: set[asyncio.Task[None]] = set()  # the wakes of paused sandboxes under way

    def exchange(self, request: Request, client: Client) -> Exchange | None:
        """The exchange that answers a request for a sandbox; None when the request is for
        the control API."""
        head = request.head
        if not is_sandbox_request(head, self.domain, self.lookup):
            return None
        try:
            target = resolve(head, self.domain, self.lookup)
        except RouteError as exc:
            return Answer(client, request, *plain_answer(400, str(exc)))
        if refusal := _unrelayable(request):
            return Answer(client, request, *plain_answer(400, refusal))
        if is_envd_control_path(target, head.path):
            return Answer(client, request, *plain_answer(404, "404 page not found"))
        location = self.lookup.locate(target.sandbox_id)
        if location is None:  # paused (it may wake), or gone: sandboxd/proxy/waking.py
            admit = functools.partial(self.admit, client, request, target)
            return Waking(client, request, target, self.lookup, admit, self.waking)
        return self.admit(client, request, target, location)

    def admit(self, client: Client, request: Request, target: Target,
              location: Location) -> Exchange:  # fmt: skip
        """The relay of a request to the running sandbox at `location`, or the 403 of E2B's
        traffic token."""
        host = None
        if target.port != ENVD_PORT:
            ingress = self.lookup.ingress(target.sandbox_id)
            if refusal := _token_refusal(ingress, request):
                return Answer(client, request, *json_answer(
                    {"sandboxId": target.sandbox_id, "message": refusal, "code": 403},
                    b"403 Forbidden"))  # fmt: skip
            host = ingress.host_for(target.port)
        return Relay(self, client, request, location, target, host)

    def cut(self, sandbox_id: str) -> None:
        """End every open proxied connection of the sandbox at transport level (on kill and
        pause): clients see the connection drop, not a clean end of stream."""
        count = self.pool.cut(sandbox_id)
        if count:
            log.debug("sandbox %s: cut %d proxied connections", sandbox_id, count)

    def close(self) -> None:
        self.pool.close()


class Relay:
    """One request relayed to a port inside a sandbox, and its response back."""

    def __init__(self, proxy: SandboxProxy, client: Client, request: Request,
                 location: Location, target: Target, host: bytes | None = None) -> None:  # fmt: skip
        self.proxy, self.client, self.request = proxy, client, request
        self.location, self.target = location, target
        self.upstream: UpstreamConnection | None = None
        self.head, self.chunked = _request_head(request, target, host, proxy.added)
        # Bytes not yet written: the head and body, until the connection is made or the end of
        # the read they came in (one write, one wakeup of the sandbox's server for both).
        self.pending: list[bytes] = [self.head]
        self.request_ended = False
        self.response_begun = False
        self.finished = False  # answered, failed or abandoned: nothing more to do
        self.client_full = False  # the client's transport holds too much: do not read
        self.body_seen = False
        self.reused = False  # sent on a kept-alive connection, which its server may be closing
        self._connecting: asyncio.Task[None] | None = None

    # Exchange

    def start(self) -> None:
        upstream = self.proxy.pool.take_idle(self.target)
        if upstream is not None:
            self.reused = True
            self._send(upstream)
            return
        self._connect_soon()

    def body(self, data: bytes) -> None:
        self.body_seen = self.body_seen or bool(data)
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        if self.pending:
            self.pending.append(data)
        elif self.upstream is not None:
            self.upstream.write(data)

    def end(self) -> None:
        self.request_ended = True
        if self.chunked:
            self.body(b"")  # the last chunk: "0\r\n\r\n"
        self.flush()

    def flush(self) -> None:
        if self.upstream is not None and self.pending:
            pending, self.pending = self.pending, []
            self.upstream.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def client_writable(self, writable: bool) -> None:
        self.client_full = not writable
        if self.upstream is not None:
            self.upstream.reading(writable)

    def client_lost(self) -> None:
        self._finish()
        if self._connecting is not None:
            self._connecting.cancel()
        if self.upstream is not None:
            self.proxy.pool.drop(self.upstream)  # the sandbox's server sees the client go

    # ResponseSink (the upstream connection's callbacks)

    def response_bytes(self, data: memoryview) -> bool:
        self.response_begun = True
        if len(data) < COPY_BELOW and self.client.backed_up():
            self.client.write(bytes(data))  # see upstream.ReadBuffer: not to pin its 1 MiB
            return False
        return self.client.write(data)

    def response_complete(self, keep_alive: bool) -> None:
        upstream, self.upstream = self.upstream, None
        self._finish()
        assert upstream is not None  # noqa: S101  # only a started upstream answers
        if self.request_ended:
            self.proxy.pool.release(upstream)
        else:
            self.proxy.pool.drop(upstream)  # an early answer: the rest of the body is dropped
        # The head went to the client as the sandbox sent it: a "close" there is the client's.
        self.client.answered(keep_alive and self.request.keep_alive)

    def response_failed(self, reason: str, received: bool) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            self.proxy.pool.drop(upstream)
        if self.finished:
            return
        if not received and self._retryable():
            # A server closes an idle kept-alive connection when it likes (Node after 5 s,
            # gunicorn after 2); a request sent as it did so may not have reached it. RFC 9110
            # §9.2.2 lets an idempotent one be sent again, as clients do, on a new connection.
            self.reused = False
            self.pending = [self.head]
            self._connect_soon()
            return
        self._finish()
        if self.response_begun:
            log.debug("sandbox %s: response cut: %s", self.target.sandbox_id, reason)
            self.client.abort()
        else:
            self._answer_502("The sandbox closed the connection without answering")

    def upstream_writable(self, writable: bool) -> None:
        self.client.hold_reading("upstream", not writable)

    # internals

    def _sandbox_running(self) -> bool:
        return self.proxy.lookup.locate(self.target.sandbox_id) == self.location

    def _retryable(self) -> bool:
        return (
            self._sandbox_running()  # not a cut by kill or pause
            and self.reused
            and not self.response_begun
            and self.request_ended
            and not self.body_seen
            and not self.chunked  # its last chunk went with the first try
            and self.request.head.method in IDEMPOTENT_WITHOUT_BODY
        )

    def _connect_soon(self) -> None:
        self.client.hold_reading("connecting", True)
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        try:
            upstream = await self.proxy.pool.connect(self.location, self.target)
        except OSError:
            self._finish()
            self._answer_502("The sandbox is running but port is not open")
            return
        finally:
            self.client.hold_reading("connecting", False)
        if self.finished:  # the client left meanwhile
            self.proxy.pool.drop(upstream)
            return
        if not self._sandbox_running():  # paused or killed meanwhile: its cut missed this one
            self.proxy.pool.drop(upstream)
            self._finish()
            self._answer_502("The sandbox was not found")
            return
        self._send(upstream)
        self.flush()

    def _send(self, upstream: UpstreamConnection) -> None:
        """Use `upstream`; what is pending goes at the end of the read (or at once, after a
        connect)."""
        self.upstream = upstream
        upstream.start(self, self.request.head.method == "HEAD")
        if self.client_full:
            upstream.reading(False)

    def _finish(self) -> None:
        self.finished = True
        self.pending = []
        self.client.hold_reading("upstream", False)  # the sandbox's side no longer matters

    def _answer_502(self, message: str) -> None:
        """E2B's 502: the sandbox is gone (killed or paused meanwhile), or `message` about
        its port."""
        target = self.target
        if self.proxy.lookup.locate(target.sandbox_id) is None:
            answer = sandbox_not_found(target)
        else:
            answer = json_answer({"sandboxId": target.sandbox_id, "port": target.port,
                            "message": message, "code": 502})  # fmt: skip
        Answer(self.client, self.request, *answer).start()


def _request_head(
    request: Request, target: Target, host: bytes | None, added: bytes = b""
) -> tuple[bytes, bool]:
    """The request's head for the sandbox, and whether its body goes chunked; `host`, when
    given, replaces the request's Host (the sandbox's maskRequestHost); `added`: header lines
    put at its end."""
    raw = request.raw_headers
    connection_named = _connection_tokens(raw)
    lines = [b"%s %s HTTP/%s" % (request.head.method.encode(), request.head.url,
                                 request.version.encode())]  # fmt: skip
    chunked = has_host = has_length = False
    for name, value in raw:
        lower = name.lower()
        if request.upgrade and lower in FRAMING_HEADERS:
            continue  # relayed without a body: the length must not make the server wait for one
        if lower == b"transfer-encoding":
            chunked = True
        if lower in HOP_BY_HOP or lower in NEVER_FORWARDED or lower in connection_named:
            continue
        if lower == b"content-length":
            has_length = True
        if lower == b"host":
            has_host = True
            value = host or value
        lines.append(b"%s: %s" % (name, value))
    if chunked:
        if has_length:  # RFC 9112 §6.3: chunked wins; the length must not go on
            lines = [line for line in lines if not line.lower().startswith(b"content-length:")]
        lines.append(b"transfer-encoding: chunked")
    if not has_host:  # HTTP/1.0 clients may send none; HTTP/1.1 requires one
        lines.append(b"host: %s" % (host or b"127.0.0.1:%d" % target.port))
    return b"\r\n".join(lines) + b"\r\n" + added + b"\r\n", chunked


def _token_refusal(ingress: Ingress, request: Request) -> str | None:
    """Why a request to a port of a sandbox with a traffic token is refused (E2B's words), or
    None when it carries the token."""
    if ingress.traffic_token is None:
        return None
    given = [v for n, v in request.raw_headers if n.lower() == TRAFFIC_TOKEN_HEADER]
    if not given:
        return (f"Sandbox is secured with traffic access token. Token header "
                f"'{TRAFFIC_TOKEN_HEADER.decode()}' is missing")  # fmt: skip
    if not hmac.compare_digest(given[0], ingress.traffic_token.encode()):
        return "Sandbox is secured with traffic access token. Provided token is invalid."
    return None


def _unrelayable(request: Request) -> str | None:
    """Why the request cannot go to a sandbox as it is, or None. A fragment is no part of a
    request target (RFC 9112 §3.2) and the sandbox's server drops it, so `/init#x` would be
    classified here as one path and served there as `/init`. A Connection header naming a
    framing header would have it dropped as hop-by-hop while the body it frames went on: the
    sandbox's server would read that body as a request of its own (smuggling)."""
    if b"#" in request.head.url:
        return "a request target may not hold a fragment (#)"
    if _connection_tokens(request.raw_headers) & NEVER_HOP_BY_HOP:
        return "Connection may not name Content-Length, Transfer-Encoding or Host"
    return None


def _connection_tokens(raw: list[tuple[bytes, bytes]]) -> set[bytes]:
    """Header names the Connection header declares hop-by-hop."""
    tokens: set[bytes] = set()
    for name, value in raw:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens
