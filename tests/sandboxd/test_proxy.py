"""The sandbox proxy over the wire: a real uvicorn serving SandboxProxy, real sandboxes booted
from the base template with our envd inside, httpx as the SDKs use it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import subprocess
import uuid
from typing import TYPE_CHECKING

import httptools
import httpx
import pytest

from envd.http.signing import file_signature
from sandboxd.runtime.spec import BootImage
from tests.client import AS_USER, frames, start_request
from tests.sandboxd.inside import run
from tests.sandboxd.proxied import CONTROL_API_STAND_IN, ServedProxy, envd_init, serve_proxy
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from sandboxd.runtime.nspawn.box import NspawnBox
    from sandboxd.runtime.nspawn.runtime import NspawnRuntime

pytestmark = [pytest.mark.root, pytest.mark.anyio]

MIB = 1 << 20
STREAM = {"content-type": "application/connect+json", **AS_USER}


@pytest.fixture
async def served(
    runtime: NspawnRuntime, base_template: Path
) -> AsyncIterator[tuple[ServedProxy, NspawnBox]]:
    box = await runtime.boot(uuid.uuid4().hex[:16], BootImage((base_template,)))
    async with serve_proxy() as served:
        served.lookup.running[box.id] = box
        yield served, box


def routed(box: NspawnBox, port: int = 49983) -> dict[str, str]:
    return {"e2b-sandbox-id": box.id, "e2b-sandbox-port": str(port)}


def established_to_envd(box: NspawnBox) -> int:
    """TCP connections envd has open inside the sandbox."""
    out = subprocess.run(
        ["nsenter", "-t", str(box.leader_pid), "-n", "ss", "-Htn", "state", "established",
         "( sport = :49983 )"],
        capture_output=True, text=True, check=True, timeout=10,
    ).stdout  # fmt: skip
    return len(out.splitlines())


async def test_health_through_the_routing_headers(served: tuple[ServedProxy, NspawnBox]) -> None:
    proxy, box = served
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        for _ in range(3):  # the second and third go over the kept-alive connection
            r = await client.get("/health", headers=routed(box))
            assert r.status_code == 204
    assert established_to_envd(box) == 1


async def test_requests_with_a_body_reuse_the_kept_alive_connection(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    stat = {**routed(box), **AS_USER, "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        for _ in range(3):
            r = await client.post("/filesystem.Filesystem/Stat", headers=stat,
                                  content=b'{"path": "/etc/hostname"}')  # fmt: skip
            assert r.status_code == 200, r.text
            # One connection to envd, kept for the next request (not aborted and made again).
            assert established_to_envd(box) == 1


def raw_routing(proxy: ServedProxy, box: NspawnBox, port: int = 49983) -> tuple[bytes, bytes]:
    """The proxy's host:port and the routing header lines to `port` (envd's by default) in
    `box`, for raw requests."""
    host = proxy.url.removeprefix("http://").encode()
    routing = b"E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\n" % (box.id.encode(), port)
    return host, routing


@contextlib.asynccontextmanager
async def raw_connection(
    host: bytes,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A plain TCP connection to the proxy at `host` (as raw_routing gives it)."""
    reader, writer = await asyncio.open_connection(*host.decode().split(":"))
    try:
        yield reader, writer
    finally:
        writer.close()


async def read_responses(reader: asyncio.StreamReader, count: int) -> list[tuple[int, bytes]]:
    """`count` HTTP/1.1 responses from one connection: (status, body) each, in order."""
    responses: list[tuple[int, bytes]] = []
    body: list[bytes] = []

    class Callbacks:
        def on_body(self, chunk: bytes) -> None:
            body.append(chunk)

        def on_message_complete(self) -> None:
            responses.append((parser.get_status_code(), b"".join(body)))
            body.clear()

    parser = httptools.HttpResponseParser(Callbacks())
    while len(responses) < count:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, f"connection closed after {len(responses)} responses"
        parser.feed_data(data)
    return responses


async def test_control_api_and_sandbox_requests_pipelined_on_one_connection(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    """As a shared client pool (the JS SDK's fetch) may send them: answered in order."""
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    stat = b'{"path": "/etc/hostname"}'
    requests = [
        b"GET /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing),
        b"GET /v2/sandboxes HTTP/1.1\r\nHost: %s\r\n\r\n" % host,
        b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: %s\r\n%s"
        b"Authorization: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s"
        % (host, routing, AS_USER["authorization"].encode(), len(stat), stat),
        b"GET /health HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: nosuchsandbox\r\n"
        b"E2b-Sandbox-Port: 49983\r\n\r\n" % host,
        b"GET /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing),
    ]
    async with raw_connection(host) as (reader, writer):
        writer.write(b"".join(requests))  # all at once: each waits for the one before
        responses = await read_responses(reader, len(requests))
    assert [status for status, _ in responses] == [204, 404, 200, 502, 204]
    assert responses[1][1] == CONTROL_API_STAND_IN
    assert json.loads(responses[2][1])["entry"]["name"] == "hostname"
    assert json.loads(responses[3][1])["sandboxId"] == "nosuchsandbox"
    assert established_to_envd(box) == 1  # one kept-alive connection carried the three


async def test_head_http_1_0_and_expect_continue_keep_their_meaning(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    async with raw_connection(host) as (reader, writer):
        # A HEAD answer announces a length but has no body: the next response follows it.
        writer.write(b"HEAD /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        writer.write(b"GET /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 "), head
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 204"), head
        # The sandbox's server answers 100 Continue; the body goes up only then.
        writer.write(b"POST /files?path=/tmp/continued.txt&username=root HTTP/1.1\r\n"
                     b"Host: %s\r\n%sExpect: 100-continue\r\n"
                     b"Content-Type: application/octet-stream\r\n"
                     b"Content-Length: 9\r\n\r\n" % (host, routing))  # fmt: skip
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        writer.write(b"continued")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200"), head
    # An HTTP/1.0 client gets a response it can read: no chunked body, the end by close.
    async with raw_connection(host) as (reader, writer):
        writer.write(b"GET /files?path=/tmp/continued.txt&username=root HTTP/1.0\r\n"
                     b"Host: %s\r\n%s\r\n" % (host, routing))  # fmt: skip
        response = await asyncio.wait_for(reader.read(), 10)  # to the end: closed after it
    assert response.startswith(b"HTTP/1.1 200"), response
    assert b"chunked" not in response.lower()
    assert response.endswith(b"\r\n\r\ncontinued")


async def test_upload_and_download_of_64_mib_stream_through(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    data = os.urandom(64 * MIB)

    async def upload() -> AsyncIterator[bytes]:
        for offset in range(0, len(data), MIB):
            yield data[offset : offset + MIB]

    params = {"path": "/tmp/big.bin", "username": "root"}
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        headers = {**routed(box), "content-type": "application/octet-stream"}
        r = await client.post("/files", params=params, headers=headers, content=upload())
        assert r.status_code == 200, r.text
        digest = hashlib.sha256()
        identity = {**routed(box), "accept-encoding": "identity"}  # the bytes as stored
        async with client.stream("GET", "/files", params=params, headers=identity) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_raw():
                digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


async def test_a_connect_server_stream_arrives_event_by_event(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    # Each line waits for input that is sent only once the line before it has arrived: a proxy
    # that held events back (for more bytes, or to the end) would stall it to the timeout.
    script = "for i in 1 2 3; do echo $i; read x; done"
    lines = []
    headers = {**STREAM, **routed(box)}
    async with (
        httpx.AsyncClient(base_url=proxy.url, timeout=30) as client,
        client.stream("POST", "/process.Process/Start", content=start_request(script),
                      headers=headers) as r,
    ):  # fmt: skip
        assert r.status_code == 200
        events = frames(r)
        pid = (await anext(events))["event"]["start"]["pid"]
        async for frame in events:
            if "stdout" in (data := frame.get("event", {}).get("data", {})):
                lines.append(base64.b64decode(data["stdout"]))
                newline = {"stdin": base64.b64encode(b"\n").decode()}
                sent = await client.post(
                    "/process.Process/SendInput",
                    json={"process": {"pid": pid}, "input": newline},
                    headers={**AS_USER, **routed(box)},
                )
                assert sent.status_code == 200, sent.text
    assert lines == [b"1\n", b"2\n", b"3\n"]


async def test_a_client_leaving_mid_stream_closes_envd_s_connection(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    async with (
        httpx.AsyncClient(base_url=proxy.url, timeout=30) as client,
        client.stream(
            "POST", "/process.Process/Start", content=start_request("sleep 60"),
            headers={**STREAM, **routed(box)},
        ) as r,
    ):  # fmt: skip
        async for _ in frames(r):
            break  # the start event: the stream is open
        assert established_to_envd(box) == 1
    # Leaving the block closed the client's connection mid-stream.
    await wait_until_async(lambda: established_to_envd(box) == 0, 10, "envd to see the client go")


async def test_cut_aborts_open_streams_and_health_then_answers_502(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
        async with client.stream(
            "POST", "/process.Process/Start", content=start_request("sleep 60"),
            headers={**STREAM, **routed(box)},
        ) as r:  # fmt: skip
            events = frames(r)
            await anext(events)
            del proxy.lookup.running[box.id]  # killed, as the manager would record it
            proxy.proxy.cut(box.id)
            with pytest.raises(httpx.TransportError):
                await anext(events)
        r = await client.get("/health", headers=routed(box))
        assert r.status_code == 502
        assert r.json() == {"sandboxId": box.id, "message": "The sandbox was not found",
                            "code": 502}  # fmt: skip
    await wait_until_async(lambda: established_to_envd(box) == 0, 10, "envd to see the cut")


async def read_to_the_end(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


async def test_a_cut_stream_is_reset_not_ended(served: tuple[ServedProxy, NspawnBox]) -> None:
    """A clean close in the middle of a chunked body read as a protocol error to the Python
    SDK 2.45 ("unexpected EOF during chunked read"), which probes /health, and so reports the
    kill, only after a transport failure: the client must see a reset."""
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    body = start_request("sleep 60")
    headers = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in STREAM.items())
    async with raw_connection(host) as (reader, writer):
        writer.write(b"POST /process.Process/Start HTTP/1.1\r\nHost: %s\r\n%s%s"
                     b"Content-Length: %d\r\n\r\n%s"
                     % (host, routing, headers, len(body), body))  # fmt: skip
        received = b""
        while b'"start"' not in received:  # the start event: the response is under way
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, received
            received += chunk
        del proxy.lookup.running[box.id]  # killed, as the manager would record it
        proxy.proxy.cut(box.id)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(read_to_the_end(reader), 10)


async def test_errors_as_e2b_s_proxy_answers_them(served: tuple[ServedProxy, NspawnBox]) -> None:
    proxy, box = served
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        r = await client.get("/health", headers={"e2b-sandbox-id": "nosuchsandbox",
                                                 "e2b-sandbox-port": "49983"})  # fmt: skip
        assert r.status_code == 502
        assert r.content == (b'{"sandboxId": "nosuchsandbox", "message": '
                             b'"The sandbox was not found", "code": 502}')  # fmt: skip
        r = await client.get("/", headers=routed(box, port=1))
        assert r.status_code == 502
        assert r.json() == {"sandboxId": box.id, "port": 1, "code": 502,
                            "message": "The sandbox is running but port is not open"}  # fmt: skip
        r = await client.get("/health", headers={"e2b-sandbox-id": box.id})
        assert (r.status_code, r.text) == (400, "missing header E2b-Sandbox-Port\n")
        for bad in ({"e2b-sandbox-id": "Bad-ID", "e2b-sandbox-port": "49983"},
                    {"e2b-sandbox-id": box.id, "e2b-sandbox-port": "x"},
                    {"e2b-sandbox-id": box.id, "e2b-sandbox-port": "70000"}):  # fmt: skip
            assert (await client.get("/health", headers=bad)).status_code == 400
        r = await client.get("/health", headers={"host": "nodot:3000"})
        assert (r.status_code, r.content) == (404, CONTROL_API_STAND_IN)  # not a sandbox host


async def test_the_proxy_s_own_answers_keep_the_connection_usable(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    async with raw_connection(host) as (reader, writer):
        # E2B's 502 to a HEAD: its length, no body; then a port in a digit int() does not
        # read (latin-1 superscript two): a 400, not a dropped connection; then envd.
        writer.write(b"HEAD /health HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: nosuchsandbox\r\n"
                     b"E2b-Sandbox-Port: 49983\r\n\r\n" % host)  # fmt: skip
        writer.write(b"GET /health HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\n"
                     b"E2b-Sandbox-Port: \xb2\r\n\r\n" % (host, box.id.encode()))  # fmt: skip
        writer.write(b"GET /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 502"), head
        assert b"content-length: 0" not in head.lower()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 400"), head
        length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
        assert length, head
        body = await asyncio.wait_for(reader.readexactly(int(length[1])), 10)
        assert body.startswith(b"Invalid sandbox port"), body
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 204"), head


# Answers the first request on each connection and keeps it open; a second request on it finds
# the connection closed unanswered, as by a server closing an idle kept-alive connection.
ONE_ANSWER_PER_CONNECTION = """
import socket, threading
server = socket.create_server(("127.0.0.1", 8081))
def serve(conn):
    lines = conn.makefile("rb")
    while lines.readline() not in (b"\\r\\n", b""):
        pass
    conn.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: 5\\r\\n\\r\\nfirst")
    lines.readline()
    conn.close()
while True:
    threading.Thread(target=serve, args=(server.accept()[0],)).start()
"""


async def test_a_request_on_a_connection_its_server_closed_is_sent_again(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    script = box.dir / "root/root/one_answer.py"  # the sandbox's /root, seen from the host
    script.write_text(ONE_ANSWER_PER_CONNECTION)
    run(box, "systemd-run -q --unit one-answer python3 /root/one_answer.py")
    async with httpx.AsyncClient(base_url=proxy.url, headers=routed(box, 8081)) as client:
        await wait_until_async(lambda: port_answers(client), 10, "the server in the sandbox")
        # A GET on the kept-alive connection the server closes: sent again on a new one.
        for _ in range(3):
            r = await client.get("/")
            assert (r.status_code, r.content) == (200, b"first")
        # A request with a body is not (its body is gone): E2B's 502.
        r = await client.post("/", content=b"body")
        assert r.status_code == 502
        assert r.json()["message"] == "The sandbox closed the connection without answering"
    # Nor a chunked one, even empty (its last chunk went with the first try).
    host, routing = raw_routing(proxy, box, 8081)
    async with raw_connection(host) as (reader, writer):
        writer.write(b"GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await asyncio.wait_for(reader.readexactly(5), 10) == b"first"
        writer.write(b"GET / HTTP/1.1\r\nHost: %s\r\n%sTransfer-Encoding: chunked\r\n\r\n"
                     b"0\r\n\r\n" % (host, routing))  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 502"), head


async def port_answers(client: httpx.AsyncClient) -> bool:
    return (await client.get("/")).status_code == 200


async def test_an_upgrade_with_a_body_is_relayed_without_it(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    """httptools hands on no body after an upgrade's head (the bytes are the new protocol's):
    the request goes up without its length, so the sandbox's server does not wait for it."""
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    stat = b'{"path": "/etc/hostname"}'
    async with raw_connection(host) as (reader, writer):
        writer.write(b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: %s\r\n%s"
                     b"Authorization: %s\r\nContent-Type: application/json\r\n"
                     b"Connection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: %d\r\n\r\n%s"
                     % (host, routing, AS_USER["authorization"].encode(), len(stat), stat))  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 4"), head  # envd's answer to a Stat without a body
        await asyncio.wait_for(reader.read(), 10)  # then the connection ends (no upgrade)


# A server that answers HEAD with GET's body too, as `do_HEAD = do_GET` handlers do.
HEAD_WITH_A_BODY = """
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "4")
        self.end_headers()
        self.wfile.write(b"body")
    do_HEAD = do_GET
HTTPServer(("127.0.0.1", 8082), Handler).serve_forever()
"""


async def test_a_head_answered_with_a_body_ends_the_connection(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    (box.dir / "root/root/head_body.py").write_text(HEAD_WITH_A_BODY)
    run(box, "systemd-run -q --unit head-body python3 /root/head_body.py")
    async with httpx.AsyncClient(base_url=proxy.url, headers=routed(box, 8082)) as client:
        await wait_until_async(lambda: port_answers(client), 10, "the server in the sandbox")
    host, routing = raw_routing(proxy, box, 8082)
    async with raw_connection(host) as (reader, writer):
        writer.write(b"HEAD / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        writer.write(b"GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, routing))
        received = await asyncio.wait_for(reader.read(), 10)  # to the end: closed after HEAD
    # Only the HEAD's answer: the body after it would have been read as the GET's answer.
    assert received.startswith(b"HTTP/1.1 200"), received
    assert received.count(b"HTTP/1.1 ") == 1, received


async def test_envd_control_paths_are_refused_after_cleaning(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        for path in ("/init", "//init", "/init/", "/files/../init", "/%69nit", "/freeze",
                     "/upgrade", "/fsthaw"):  # fmt: skip
            # The whole URL: httpx would merge "//init" with a base URL into "/".
            r = await client.post(proxy.url + path, headers=routed(box), content=b"{}")
            assert r.status_code == 404, path
    assert established_to_envd(box) == 0  # not one of them reached envd


async def test_a_fragment_cannot_carry_a_control_path_past_the_proxy(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    """envd's server drops a fragment: `/init#x` was classified as a path of its own here and
    served as `/init` there (a new access token and env vars set by anyone)."""
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    for target in (b"/init#x", b"/init#", b"/health#x", b"http://127.0.0.1/init#x"):
        async with raw_connection(host) as (reader, writer):
            writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: 2\r\n\r\n{}"
                         % (target, host, routing))  # fmt: skip
            [(status, body)] = await read_responses(reader, 1)
        assert status == 400, (target, body)
        assert b"fragment" in body
    assert established_to_envd(box) == 0  # not one of them reached envd


async def test_a_connection_header_naming_framing_headers_is_refused(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    """Dropping Content-Length as hop-by-hop while relaying the body made envd read the body
    as a second request: a smuggled /init ran, and the client got two answers to one."""
    proxy, box = served
    host, routing = raw_routing(proxy, box)
    smuggled = b"POST /init HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    for named in (b"Content-Length", b"keep-alive, content-length", b"Transfer-Encoding",
                  b"Host"):  # fmt: skip
        async with raw_connection(host) as (reader, writer):
            writer.write(
                b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: %s\r\n%s"
                b"Connection: %s\r\nContent-Length: %d\r\n\r\n%s"
                % (host, routing, named, len(smuggled), smuggled)
            )
            [(status, body)] = await read_responses(reader, 1)
        assert status == 400, (named, body)
        assert b"Connection may not name" in body
    assert established_to_envd(box) == 0


async def test_host_routing(served: tuple[ServedProxy, NspawnBox]) -> None:
    proxy, box = served
    port = proxy.url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        r = await client.get("/health", headers={"host": f"49983-{box.id}.localhost:{port}"})
        assert r.status_code == 204
        r = await client.get("/health", headers={"host": f"49983-nosuch.localhost:{port}"})
        assert r.json()["message"] == "The sandbox was not found"


async def test_a_signed_files_url_without_headers_finds_its_sandbox(
    served: tuple[ServedProxy, NspawnBox],
) -> None:
    proxy, box = served
    token = uuid.uuid4().hex
    assert await envd_init(box, {"accessToken": token}) == 204
    proxy.lookup.tokens[box.id] = token
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        params = {"path": "/tmp/signed.txt", "username": "root"}
        headers = {**routed(box), "x-access-token": token,
                   "content-type": "application/octet-stream"}  # fmt: skip
        r = await client.post("/files", params=params, headers=headers, content=b"signed")
        assert r.status_code == 200, r.text
        signature = file_signature("/tmp/signed.txt", "read", "root", token, None)
        query = {**params, "signature": signature}
        r = await client.get("/files", params=query)
        assert (r.status_code, r.content) == (200, b"signed")
        bad = {**query, "signature": "v1_wrong"}
        r = await client.get("/files", params=bad)
        # No sandbox matched: the request is the control API's.
        assert (r.status_code, r.content) == (404, CONTROL_API_STAND_IN)
