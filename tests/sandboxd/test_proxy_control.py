"""The control API's half of sandboxd's listener (sandboxd/proxy/control_exchange.py): the ASGI
app run on the request the listener parsed, answered as uvicorn's own protocols answer, and the
shape of what uvicorn gives an HTTP protocol class, which that relies on."""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING

import pytest
import uvicorn
from uvicorn.server import ServerState

from sandboxd.proxy.listener import Listener
from tests.sandboxd.proxied import serve_proxy

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

pytestmark = pytest.mark.anyio

SEEN = ("type", "http_version", "method", "path", "raw_path", "query_string", "headers",
        "root_path", "scheme", "state")  # fmt: skip


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """`/echo` answers the body; `/scope` what the app saw; `/chunked` two chunks; `/fail` raises
    before answering, `/fail-after` after the head."""
    path = scope["path"]
    if path.startswith("/fail"):
        if path == "/fail-after":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"10")]})  # fmt: skip
        raise RuntimeError("planted")
    body = b""
    if path == "/echo":
        while (message := await receive())["more_body"]:
            body += message["body"]
        body += message["body"]
    elif path == "/scope":
        seen = {key: scope[key] for key in SEEN}
        body = json.dumps(seen, default=lambda b: b.decode(), sort_keys=True).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []
                if path == "/chunked" else [(b"content-length", b"%d" % len(body))]})  # fmt: skip
    if path == "/chunked":
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        body = b"two"
    await send({"type": "http.response.body", "body": body})


async def exchange(*writes: bytes) -> bytes:
    """What the listener answers to `writes` on one connection, each sent once it is quiet;
    `<EOF>` where it closed, and the Date as `X`."""
    async with serve_proxy(control_api=app) as served:
        host, port = served.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        answer = b""
        for data in writes:
            writer.write(data)
            while True:
                try:
                    read = await asyncio.wait_for(reader.read(65536), 0.3)
                except TimeoutError:
                    break
                answer += read or b"<EOF>"
                if not read:
                    break
        writer.close()
    return re.sub(rb"\r\ndate: [^\r]+\r\n", b"\r\ndate: X\r\n", answer)


def head(status: bytes, *headers: bytes) -> bytes:
    """A head as uvicorn writes it, its server_state.default_headers first."""
    return b"HTTP/1.1 %s\r\ndate: X\r\nserver: uvicorn\r\n%s\r\n" % (
        status,
        b"".join(h + b"\r\n" for h in headers),
    )


def test_uvicorn_gives_a_protocol_class_what_the_control_exchange_uses() -> None:
    """What control_exchange.py uses of uvicorn: an uvicorn where this changed needs the
    control exchange looked at again."""
    config = uvicorn.Config(app, http=Listener)
    config.load()
    assert config.loaded
    assert config.http_protocol_class is Listener
    assert callable(config.loaded_app)
    assert (config.root_path, config.asgi_version) == ("", "3.0")
    assert isinstance(config.timeout_keep_alive, int)
    state = ServerState()
    assert (state.connections, state.tasks, state.default_headers, state.total_requests) == (
        set(), set(), [], 0)  # fmt: skip


async def test_pipelined_requests_are_answered_in_order_and_framed_as_uvicorn_does() -> None:
    get = b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = await exchange(get % b"/a" + get % b"/chunked" + get.replace(b"GET", b"HEAD") % b"/b")
    assert answer == (head(b"200 OK", b"content-length: 0")
                      + head(b"200 OK", b"transfer-encoding: chunked") + b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"
                      + head(b"200 OK", b"content-length: 0"))  # fmt: skip


async def test_a_body_reaches_the_app_chunked_or_after_100_continue() -> None:
    chunked = await exchange(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"2\r\nde\r\n0\r\n\r\n",
    )
    assert chunked == head(b"200 OK", b"content-length: 5") + b"abcde"
    continued = await exchange(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        b"hello",
    )
    assert continued == (b"HTTP/1.1 100 Continue\r\n\r\n"
                         + head(b"200 OK", b"content-length: 5") + b"hello")  # fmt: skip


async def test_the_app_gets_the_scope_uvicorn_would_give_it() -> None:
    answer = await exchange(b"GET /sc%6fpe?q=%20a HTTP/1.1\r\nHost: x\r\nX-Foo: Bar\r\n\r\n")
    seen = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert seen == {
        "type": "http", "http_version": "1.1", "method": "GET", "path": "/scope",
        "raw_path": "/sc%6fpe", "query_string": "q=%20a", "headers": [["host", "x"], ["x-foo", "Bar"]],
        "root_path": "", "scheme": "http", "state": {},
    }  # fmt: skip


async def test_an_upgrade_is_answered_as_plain_http_then_the_connection_closes() -> None:
    answer = await exchange(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                            b"Upgrade: websocket\r\n\r\n")  # fmt: skip
    assert answer == head(b"200 OK", b"content-length: 0") + b"<EOF>"


async def test_an_app_that_fails_is_a_500_before_its_answer_and_a_cut_after() -> None:
    before = await exchange(b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\n\r\n")
    assert before == head(b"500 Internal Server Error", b"content-type: text/plain; charset=utf-8",
                          b"content-length: 21", b"connection: close"
                          ) + b"Internal Server Error<EOF>"  # fmt: skip
    after = await exchange(b"GET /fail-after HTTP/1.1\r\nHost: x\r\n\r\n")
    assert after == head(b"200 OK", b"content-length: 10") + b"<EOF>"
