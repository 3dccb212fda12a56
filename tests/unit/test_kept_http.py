"""Kept-alive connections to a server (sandboxd.kept_http: a node's API, envd) against a real
HTTP/1.1 server on loopback, scripted per connection: calls reuse one connection; a request sent
into a kept connection the server closes unanswered goes once more on a new one, but not one on a
new connection; a call cancelled mid-answer does not leave its answer to the next call; an answer
that is not HTTP, or no server, is Unreachable."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import pytest

from sandboxd.kept_http import KeptConnections, Unreachable, tcp

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.anyio

TIMEOUTS = (5.0, 60.0)


class Node:
    """Answers each request with JSON naming the connection (in order of accept) and the
    request's number on it, and echoing its body; `script(connection, number)` may instead
    return "close" (close unanswered), "garbage" or "hold" (answer once `release` is set)."""

    def __init__(self, script: Callable[[int, int], str | None] = lambda _c, _n: None) -> None:
        self.script = script
        self.accepted = 0
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection, self.accepted = self.accepted, self.accepted + 1
        self._writers.append(writer)
        number = 0
        while (body := await _request_body(reader)) is not None:
            step = self.script(connection, number)
            if step == "close":
                writer.close()
                return
            if step == "garbage":
                writer.write(b"this is not HTTP\r\n\r\n")
                continue
            if step == "hold":
                self.held.set()
                await self.release.wait()
            answer = json.dumps({"connection": connection, "number": number,
                                 "echo": body.decode()}).encode()  # fmt: skip
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(answer), answer))
            number += 1

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


async def _request_body(reader: asyncio.StreamReader) -> bytes | None:
    """The next request's body; None once the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        return await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


@pytest.fixture
async def node() -> AsyncIterator[tuple[Node, int]]:
    served = Node()
    listening = await asyncio.start_server(served.serve, "127.0.0.1", 0)
    yield served, listening.sockets[0].getsockname()[1]
    listening.close()
    served.close()


async def call(connections: KeptConnections, body: str) -> dict[str, object]:
    status, answer = await connections.request(b"POST", b"/node/v1/op", [(b"host", b"n")],
                                               body.encode())  # fmt: skip
    assert status == 200
    return json.loads(answer)  # type: ignore[no-any-return]


async def test_calls_reuse_one_connection(node: tuple[Node, int]) -> None:
    served, port = node
    connections = KeptConnections(tcp("127.0.0.1", port), 30, TIMEOUTS)
    answers = [await call(connections, f"call {i}") for i in range(3)]
    assert answers == [{"connection": 0, "number": i, "echo": f"call {i}"} for i in range(3)]
    assert served.accepted == 1
    connections.close()


async def test_a_kept_connection_closed_unanswered_is_replaced(node: tuple[Node, int]) -> None:
    """The node read the second request and closed (its keep-alive ran out just then): the
    call goes once more, on a new connection."""
    served, port = node
    served.script = lambda connection, number: "close" if (connection, number) == (0, 1) else None
    connections = KeptConnections(tcp("127.0.0.1", port), 30, TIMEOUTS)
    assert await call(connections, "first") == {"connection": 0, "number": 0, "echo": "first"}
    assert await call(connections, "again") == {"connection": 1, "number": 0, "echo": "again"}
    assert served.accepted == 2
    connections.close()


@pytest.mark.parametrize("step", ["close", "garbage"])
async def test_a_new_connection_closed_unanswered_or_not_http_is_unreachable(
    node: tuple[Node, int], step: str
) -> None:
    """On a connection of its own the node may have acted on the request: it is not sent again,
    whether the node closed it unanswered or answered what is not HTTP."""
    served, port = node
    served.script = lambda _connection, _number: step
    connections = KeptConnections(tcp("127.0.0.1", port), 30, TIMEOUTS)
    with pytest.raises(Unreachable, match="connection ended"):
        await call(connections, step)
    assert served.accepted == 1
    connections.close()


async def test_a_call_cancelled_mid_answer_leaves_no_answer_behind(node: tuple[Node, int]) -> None:
    served, port = node
    served.script = lambda connection, number: "hold" if (connection, number) == (0, 0) else None
    connections = KeptConnections(tcp("127.0.0.1", port), 30, TIMEOUTS)
    cancelled = asyncio.create_task(call(connections, "cancelled"))
    await served.held.wait()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    served.release.set()  # the held answer is sent now, into a connection closed
    assert await call(connections, "next") == {"connection": 1, "number": 0, "echo": "next"}
    connections.close()


async def test_no_node_is_unreachable(node: tuple[Node, int]) -> None:
    listening = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    connections = KeptConnections(tcp("127.0.0.1", port), 30, TIMEOUTS)
    with pytest.raises(Unreachable, match="cannot connect"):
        await call(connections, "nowhere")
