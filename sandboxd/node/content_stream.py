"""One streamed HTTP/1.1 exchange with a node's volume-content API (sandboxd.node.remote.
RemoteNode.volume_content): the request's body sent as it comes, the answer's head read, its
body left to stream. Over a connection of its own (closed after), parsed by httptools
(uvicorn's parser already) as it arrives: httpcore's pure-Python stack read 64 KiB at a time
and held a relayed download to a fraction of the disk's rate (bench/README.md, "Volumes
through a gateway"). A request with a body asks `Expect: 100-continue` (uvicorn answers it
when the endpoint first reads the body): a node that refuses before reading it (a path that
exists, say) answers at once, and no body is sent into a connection it closes."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING, cast

import httptools

from sandboxd.errors import NodeUnreachable

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator

CONTINUE = 100
# An answer's body held at most while the reader is slower than the node (then reading pauses).
HELD = 4 << 20


class Answer(asyncio.Protocol):
    """The connection and the node's answer: `status`, `headers` (names lower-cased), the body
    by `aiter_stream()`; `aclose()` ends the connection (also when the body was not read)."""

    def __init__(self, read_timeout_s: float) -> None:
        self._timeout_s = read_timeout_s
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._body: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._head_done = self._done = self._closed = False
        self._interim = self._continued = False  # a 100 Continue being read, and read
        self._error: BaseException | None = None
        self._arrived = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    # asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # a stream's (uvloop's or asyncio's)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._error = exc
            self._end()
        if self._held > HELD and self._transport is not None:
            self._transport.pause_reading()
        self._arrived.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._error = self._error or exc
        self._arrived.set()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if self.status == CONTINUE:
            self._interim = True
            self.headers.clear()
            return
        self._head_done = True
        self._writable.set()  # answered: the rest of the body is not sent

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._held += len(body)

    def on_message_complete(self) -> None:
        if self._interim:  # the final answer follows
            self._interim, self._continued = False, True
            return
        self._done = True

    async def send(self, head: bytes, body: AsyncIterable[bytes] | None, chunked: bool) -> None:
        """The request; its body (if `head` expects 100-continue) once the node asks for it,
        until it ends or the node answers or closes first.

        Raises:
            NodeUnreachable: the node closed, or sent nothing for the read timeout.
        """
        assert self._transport is not None  # noqa: S101  # connected
        self._transport.write(head)
        if body is None:
            return
        while not (self._continued or self._head_done):
            await self._next("before answering")
        async for piece in body:
            if self._head_done or self._closed:
                return
            if piece:
                self._transport.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
                await self._writable.wait()
        if chunked and not self._closed:
            self._transport.write(b"0\r\n\r\n")

    async def read_head(self) -> None:
        """Raises NodeUnreachable: the connection ended, or what came is not HTTP."""
        while not self._head_done:
            await self._next("before answering")

    async def aiter_stream(self) -> AsyncIterator[bytes]:
        """Raises NodeUnreachable: the connection ended before the body did."""
        while True:
            while self._body:
                piece = self._body.popleft()
                self._held -= len(piece)
                yield piece
            if self._transport is not None and self._held <= HELD:
                self._transport.resume_reading()
            if self._done:
                return
            await self._next("mid-answer")

    async def aclose(self) -> None:
        self._end()

    async def _next(self, when: str) -> None:
        """Wait for more of the answer. Raises NodeUnreachable: the connection ended."""
        if self._closed or self._error is not None:
            raise NodeUnreachable(f"the node's connection ended {when}: {self._error!r}")
        self._arrived.clear()
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._arrived.wait()
        except TimeoutError as exc:
            self._end()
            raise NodeUnreachable(f"the node sent nothing for {self._timeout_s} s") from exc

    def _end(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def exchange(
    address: tuple[str, int],
    head: bytes,
    body: AsyncIterable[bytes] | None,
    chunked: bool,
    timeouts: tuple[float, float],
) -> Answer:
    """Send the request `head` (ending in the blank line) and `body` (chunked framing added when
    `chunked`) to `address` and read the answer's head; `timeouts`: to connect, and to wait for
    each piece of the answer.

    Raises:
        NodeUnreachable: no connection, or no answer.
    """
    loop = asyncio.get_running_loop()
    answer = Answer(timeouts[1])
    try:
        async with asyncio.timeout(timeouts[0]):
            await loop.create_connection(lambda: answer, *address)
    except (OSError, TimeoutError) as exc:
        raise NodeUnreachable(f"cannot connect: {exc!r}") from exc
    try:
        await answer.send(head, body, chunked)
        await answer.read_head()
    except BaseException:
        with contextlib.suppress(Exception):
            await answer.aclose()
        raise
    return answer
