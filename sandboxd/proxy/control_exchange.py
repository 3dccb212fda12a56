"""A control API request on sandboxd's listener: answered by a uvicorn HttpToolsProtocol of its
own, fed the request's bytes re-encoded, over a transport that writes to the client's
connection and tells when the response is complete. uvicorn is driven only through the asyncio
Protocol interface, never its internals."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from sandboxd.proxy.exchange import Request
    from sandboxd.proxy.listener import Listener

log = logging.getLogger("sandboxd.proxy.control")


class ControlExchange:
    """A control API request, answered by a uvicorn protocol of its own fed the request's
    bytes; its transport forwards the response here and watches for its end."""

    def __init__(self, listener: Listener, request: Request) -> None:
        self.listener = listener
        self.request = request
        self.pending: list[bytes] = []
        self.chunked = any(name.lower() == b"transfer-encoding" for name, _ in request.raw_headers)
        self.server: HttpToolsProtocol | None = None
        self.transport = ControlTransport(self)
        self._response = httptools.HttpResponseParser(self)
        self._final_head = False
        self.done = False

    def start(self) -> None:
        config, server_state, app_state = self.listener.uvicorn
        self.server = HttpToolsProtocol(config=config, server_state=server_state,
                                        app_state=app_state)  # fmt: skip
        self.server.connection_made(self.transport)  # type: ignore[arg-type]  # a Transport's API
        head = self.request.head
        lines = [b"%s %s HTTP/%s" % (head.method.encode(), head.url,
                                     self.request.version.encode())]  # fmt: skip
        lines += [b"%s: %s" % pair for pair in self.request.raw_headers]
        self.server.data_received(b"\r\n".join(lines) + b"\r\n\r\n")
        pending, self.pending = self.pending, []
        for data in pending:
            self.server.data_received(data)

    def body(self, data: bytes) -> None:
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        if self.server is None:
            self.pending.append(data)
        elif not self.done:
            self.server.data_received(data)

    def end(self) -> None:
        if self.chunked:
            self.body(b"")

    def flush(self) -> None:
        pass

    def client_writable(self, writable: bool) -> None:
        if self.server is not None:
            if writable:
                self.server.resume_writing()
            else:
                self.server.pause_writing()

    def client_lost(self) -> None:
        self.done = True
        if self.server is not None:
            self.server.connection_lost(None)

    # the response, as uvicorn writes it

    def response_bytes(self, data: bytes) -> None:
        self.listener.write(data)
        if self.done:
            return
        try:
            self._response.feed_data(data)
        except httptools.HttpParserError:
            log.exception("the control API wrote a response that does not parse")
            self.listener.abort()

    def on_headers_complete(self) -> None:
        self._final_head = self._response.get_status_code() >= 200
        if self._final_head and self.request.head.method == "HEAD":
            self._finish()

    def on_message_complete(self) -> None:
        if self._final_head:
            self._finish()

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        self.listener.hold_reading("control", False)  # the app may not have read the body
        keep_alive = self._response.should_keep_alive() and self.request.keep_alive
        # uvicorn finishes its bookkeeping after this write returns; then it is let go (as if
        # its client had left: its keep-alive timer stops), and this connection goes on.
        server = self.server
        if server is not None:
            asyncio.get_running_loop().call_soon(server.connection_lost, None)
        self.listener.answered(keep_alive)


class ControlTransport:
    """The transport a control exchange's uvicorn protocol writes to: the client's, until the
    response is complete."""

    def __init__(self, exchange: ControlExchange) -> None:
        self.exchange = exchange

    def write(self, data: bytes) -> None:
        self.exchange.response_bytes(data)

    def close(self) -> None:
        if not self.exchange.done:  # uvicorn ends the connection (an error, or shutdown)
            self.exchange.done = True
            self.exchange.listener.answered(False)

    def is_closing(self) -> bool:
        transport = self.exchange.listener.transport
        return self.exchange.done or transport is None or transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        transport = self.exchange.listener.transport
        return default if transport is None else transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.exchange.listener.hold_reading("control", True)

    def resume_reading(self) -> None:
        self.exchange.listener.hold_reading("control", False)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        pass  # only for upgrades, which uvicorn is never sent
