"""A control API request on sandboxd's listener, answered by running the control API's ASGI app
on it here: the scope is made from the head the listener parsed, and the app's `receive` and
`send` are served as uvicorn's own HTTP protocols serve them (the body with flow control and
100 Continue, the response framed by Content-Length or chunked, keep-alive, a 500 for an app
that fails before answering and a closed connection for one that fails after).

Why not hand the request to uvicorn: uvicorn has no public call that takes a request already
parsed, only its protocol classes, whose constructors and behaviour are its own to change (one
built per request, fed the request re-encoded, parsed every request twice). What the listener
and this module use of uvicorn is what it gives any HTTP protocol class (`Config(http=)`):
the `config` (its loaded app, root path, ASGI version), the `server_state` (`connections` and
`tasks`, which a graceful shutdown waits for; `default_headers`, its Date and Server; the
request count) and the lifespan's `app_state`, given to each request as `scope["state"]`.
tests/sandboxd/test_proxy_control.py pins that shape and the behaviour.
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from sandboxd.proxy.exchange import Request
    from sandboxd.proxy.listener import Listener

    Message = MutableMapping[str, Any]
    AsgiApp = Callable[
        [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
        Awaitable[object],  # None, or the app is faulty
    ]

log = logging.getLogger("sandboxd.proxy.control")

# A request body buffered beyond this, not yet received by the app, pauses reading (uvicorn's).
HIGH_WATER = 64 * 1024
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
HEADER_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
HEADER_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
INTERNAL_ERROR = b"Internal Server Error"
INTERNAL_ERROR_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"),
                          (b"content-length", b"%d" % len(INTERNAL_ERROR)),
                          (b"connection", b"close")]  # fmt: skip


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


class ControlApp:
    """The control API as one client connection serves it: uvicorn's loaded app, and what each
    request's scope shares."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any]) -> None:
        if not config.loaded:
            config.load()
        self.app: AsgiApp = config.loaded_app
        self.server_state = server_state
        self.app_state = app_state
        self.root_path: str = config.root_path
        self.base: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": config.asgi_version, "spec_version": "2.3"},
            "root_path": self.root_path,
        }

    def connected(self, transport: asyncio.BaseTransport) -> None:
        self.base["server"] = _address(transport.get_extra_info("sockname"))
        self.base["client"] = _address(transport.get_extra_info("peername"))
        self.base["scheme"] = "https" if transport.get_extra_info("sslcontext") else "http"

    def scope(self, request: Request) -> dict[str, Any]:
        """Raises UnicodeDecodeError for a path that is not ASCII, and
        httptools.HttpParserInvalidURLError for a target that is not a URL (as uvicorn)."""
        url = httptools.parse_url(request.head.url)
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        return {
            **self.base,
            "http_version": request.version,
            "method": request.head.method,
            "path": self.root_path + (unquote(path) if "%" in path else path),
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "headers": [(name.lower(), value) for name, value in request.raw_headers],
            "state": self.app_state.copy(),
        }


def _address(info: object) -> tuple[str, int] | None:
    if isinstance(info, list | tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


class ControlExchange:
    """A control API request: the app runs as a task of its own from the request's turn; its
    body is buffered here until the app receives it."""

    def __init__(self, listener: Listener, request: Request) -> None:
        self.listener = listener
        self.control = listener.control
        self.scope = self.control.scope(request)
        self.head_only = request.head.method == "HEAD"
        self.keep_alive = request.keep_alive and request.version != "1.0"
        self.upgrade = request.upgrade
        self.expect_continue = any(name.lower() == b"expect" and value.lower() == b"100-continue"
                                   for name, value in request.raw_headers)  # fmt: skip
        self.received = bytearray()
        self.more_body = True
        self.arrived = asyncio.Event()  # body, its end, or the client gone
        self.drained: asyncio.Future[None] | None = None  # while the client's side is full
        self.started = self.complete = self.disconnected = False
        self.chunked: bool | None = None
        self.remaining = 0  # of the Content-Length

    # Exchange

    def start(self) -> None:
        if self.upgrade:  # the listener closes the connection after the answer
            log.warning("an upgrade request to the control API is answered as plain HTTP")
        task = asyncio.get_running_loop().create_task(self._run())
        tasks = self.control.server_state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def body(self, data: bytes) -> None:
        if self.complete:
            return
        self.received += data
        if len(self.received) > HIGH_WATER:
            self.listener.hold_reading("control", True)
        self.arrived.set()

    def end(self) -> None:
        if not self.complete:
            self.more_body = False
            self.arrived.set()

    def flush(self) -> None:
        pass

    def client_writable(self, writable: bool) -> None:
        if not writable:
            loop = asyncio.get_running_loop()
            self.drained = self.drained or loop.create_future()
        elif self.drained is not None:
            self.drained.set_result(None)
            self.drained = None

    def client_lost(self) -> None:
        self.disconnected = True
        self.arrived.set()
        self.client_writable(True)

    # the ASGI app

    async def _run(self) -> None:
        try:
            result = await self.control.app(self.scope, self.receive, self.send)
        except BaseException:  # answered or logged, as uvicorn does (a cancel included)
            log.exception("Exception in ASGI application")
            await self._failed()
            return
        if result is not None:
            log.error("ASGI callable should return None, but returned %r.", result)
            self._abandon()
        elif not self.started and not self.disconnected:
            log.error("ASGI callable returned without starting response.")
            await self._failed()
        elif not self.complete and not self.disconnected:
            log.error("ASGI callable returned without completing response.")
            self._abandon()

    async def _failed(self) -> None:
        """A 500 when nothing of the response was sent yet, or else the connection ends."""
        if self.started:
            self._abandon()
            return
        await self.send({"type": "http.response.start", "status": 500,
                         "headers": INTERNAL_ERROR_HEADERS})  # fmt: skip
        await self.send({"type": "http.response.body", "body": INTERNAL_ERROR})

    def _abandon(self) -> None:
        if not self.complete:
            self.complete = True
            self.listener.answered(False)

    async def receive(self) -> Message:
        if self.expect_continue:
            self.expect_continue = False
            self.listener.write(CONTINUE)
        if not self.disconnected and not self.complete:
            self.listener.hold_reading("control", False)
            await self.arrived.wait()
            self.arrived.clear()
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        body, self.received = bytes(self.received), bytearray()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        """Raises RuntimeError for a message out of turn, a header that is not HTTP, or a body
        longer or shorter than its Content-Length (the app then fails, as under uvicorn)."""
        if self.drained is not None and not self.disconnected:
            await self.drained
        if self.disconnected:
            return
        if not self.started:
            self._response_start(message)
        elif not self.complete:
            self._response_body(message)
        else:
            raise RuntimeError(f"Unexpected ASGI message {message['type']!r} sent, after "
                               "response already completed.")  # fmt: skip

    def _response_start(self, message: Message) -> None:
        if message["type"] != "http.response.start":
            raise RuntimeError(f"Expected 'http.response.start', got {message['type']!r}.")
        self.started = True
        self.expect_continue = False
        status: int = message["status"]
        head = [STATUS_LINES[status]]
        close_named = False
        for name, value in [*self.control.server_state.default_headers,
                            *message.get("headers", ())]:  # fmt: skip
            if HEADER_NAME.search(name) or HEADER_VALUE.search(value):
                raise RuntimeError("Invalid HTTP header name or value.")
            name = name.lower()
            if name == b"content-length" and self.chunked is None:
                self.remaining, self.chunked = int(value.decode()), False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.remaining, self.chunked = 0, True
            elif name == b"connection" and b"close" in _tokens(value):
                self.keep_alive, close_named = False, True
            head += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close_named:
            head.append(b"connection: close\r\n")
        if self.chunked is None and not self.head_only and status not in (204, 304):
            self.chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        head.append(b"\r\n")
        self.listener.write(b"".join(head))

    def _response_body(self, message: Message) -> None:
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected 'http.response.body', got {message['type']!r}.")
        body: bytes = message.get("body", b"")
        more_body: bool = message.get("more_body", False)
        if self.head_only:
            self.remaining = 0
        elif self.chunked:
            end = b"" if more_body else b"0\r\n\r\n"
            self.listener.write(b"%x\r\n%s\r\n%s" % (len(body), body, end) if body else end)
        else:
            if len(body) > self.remaining:
                raise RuntimeError("Response content longer than Content-Length")
            self.remaining -= len(body)
            if body:
                self.listener.write(body)
        if not more_body:
            if self.remaining:
                raise RuntimeError("Response content shorter than Content-Length")
            self._complete()

    def _complete(self) -> None:
        self.complete = True
        self.arrived.set()  # an app still receiving hears the end
        self.control.server_state.total_requests += 1
        self.listener.hold_reading("control", False)  # the app may not have read the body
        self.listener.answered(self.keep_alive)


def _tokens(value: bytes) -> list[bytes]:
    return [token.strip().lower() for token in value.split(b",")]
