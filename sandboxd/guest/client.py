"""sandboxd's one way to talk to envd inside a sandbox (the proxy relays clients' requests; this
is sandboxd's own): `EnvdClient`, as the orchestrator talks to envd (/init, /metrics, and the
streamed answers of the commands sandboxd runs in its sandboxes), over sockets each sandbox's
dialer makes (sandboxd.runtime.dialer). Requests answered whole go over each sandbox's kept
connections (sandboxd.kept_http: a quarter of httpcore's time per round trip, and a create
sends /init); streamed answers over httpcore's pool, the URL's host being the sandbox id
(`http://ID:49983/init`), so that the pool keeps each sandbox's connections apart and the host
routes nothing anywhere. (The boot's readiness probe is sandboxd.guest.readiness.)"""

# httpcore's network interface takes `timeout` arguments; these classes implement it.
# ruff: noqa: ASYNC109
from __future__ import annotations

import contextlib
import functools
import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio._backends._asyncio  # now, not at the first request: 16 ms of the event loop
import anyio.abc
import httpcore

from sandboxd import kept_http

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator

    from sandboxd.runtime.dialer import Dialer


ENVD_PORT = 49983
# An idle connection into a sandbox kept this long for its next request (envd keeps its own
# side longer); a request's own timeout bounds its answer.
KEEPALIVE_S = 30
CONNECT_TIMEOUT_S = 2
ANSWER_TIMEOUT_S = 2  # a request's own default: /init and /metrics answer at once


class EnvdUnreachable(Exception):
    """envd did not answer (connection refused or reset, timeout, sandbox gone)."""


class _SocketStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            with anyio.fail_after(timeout):
                return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            with anyio.fail_after(timeout):
                await self._stream.send(buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("envd inside a sandbox speaks plain HTTP")

    def get_extra_info(self, info: str) -> Any:
        return None


class _DialerBackend(httpcore.AsyncNetworkBackend):
    """connect_tcp(host=sandbox id) → a socket to 127.0.0.1:port in that sandbox."""

    def __init__(self, resolve: Callable[[str], Dialer | None]) -> None:
        self._resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        dialer = self._resolve(host)
        if dialer is None:
            raise httpcore.ConnectError(f"sandbox {host} is not running")
        try:
            with anyio.fail_after(timeout):
                sock = await dialer.connect(port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port}") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}:{port}: {exc}") from exc
        return _SocketStream(await anyio.abc.SocketStream.from_socket(sock))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets into sandboxes")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class EnvdClient:
    """Requests to envd in the sandboxes made reachable (`reach`, `reaching`), each through
    its dialer: the API's sandboxes from their create (or adoption) to their kill, and those
    sandboxd uses itself (build sandboxes, a template's sandbox while its start command gets
    ready) for as long as it uses them. A sandbox not reachable is EnvdUnreachable."""

    def __init__(self) -> None:
        self._dialers: dict[str, Dialer] = {}
        self._kept: dict[str, kept_http.KeptConnections] = {}
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=None,
            max_keepalive_connections=256,
            keepalive_expiry=30,
            network_backend=_DialerBackend(self._dialers.get),
        )

    async def aclose(self) -> None:
        for connections in self._kept.values():
            connections.close()
        await self._pool.aclose()

    def reach(self, sandbox_id: str, dialer: Dialer) -> None:
        """Reach the sandbox's envd through `dialer` from now until `forget(sandbox_id)`."""
        self._dialers[sandbox_id] = dialer
        if (earlier := self._kept.get(sandbox_id)) is not None:  # its sockets, in a namespace
            earlier.close()  # that may be gone: they would keep it alive
        self._kept[sandbox_id] = kept_http.KeptConnections(
            functools.partial(dialer.connect, ENVD_PORT),
            KEEPALIVE_S,
            (CONNECT_TIMEOUT_S, ANSWER_TIMEOUT_S),
        )

    @contextlib.asynccontextmanager
    async def reaching(self, sandbox_id: str, dialer: Dialer) -> AsyncIterator[None]:
        """The sandbox reachable through `dialer` within the block, forgotten at its end."""
        self.reach(sandbox_id, dialer)
        try:
            yield
        finally:
            await self.forget(sandbox_id)

    async def forget(self, sandbox_id: str) -> None:
        """No longer reach a sandbox that is going away, and close the pooled connections into
        it: each is a socket in its network namespace, and a socket keeps its namespace alive
        after the sandbox died (the pool would only drop it at its next request after the
        keep-alive expiry)."""
        self._dialers.pop(sandbox_id, None)
        if (kept := self._kept.pop(sandbox_id, None)) is not None:
            kept.close()
        origin = httpcore.Origin(b"http", sandbox_id.encode(), ENVD_PORT)
        for connection in self._pool.connections:
            if connection.can_handle_request(origin):
                await connection.aclose()

    async def request(
        self,
        sandbox_id: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        token: str | None = None,
        timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> tuple[int, bytes]:
        """(status, body) of one request to envd.

        Raises:
            EnvdUnreachable: no answer within `timeout_s` (or no connection at all).
        """
        connections = self._kept.get(sandbox_id)
        if connections is None:
            raise EnvdUnreachable(f"envd in {sandbox_id}: the sandbox is not running")
        headers = _headers(token)
        content = b""
        if body is not None:
            content = json.dumps(body).encode()
            headers.append((b"Content-Type", b"application/json"))
        try:
            return await connections.request(method.encode(), path.encode(), headers, content,
                                             timeout_s)  # fmt: skip
        except kept_http.Unreachable as exc:
            raise EnvdUnreachable(f"envd in {sandbox_id}: {exc}") from exc

    @contextlib.asynccontextmanager
    async def stream(
        self,
        sandbox_id: str,
        path: str,
        *,
        content: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        token: str | None = None,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """A POST whose answer is read as it arrives: (status, the body's chunks). Streams
        stay quiet for long stretches by design (a build step compiling), so reads have a
        timeout of their own: a streaming server sends something (a keepalive) well within it.

        Raises:
            EnvdUnreachable: no connection or no answer in time, here or while reading.
        """
        timeouts = dict.fromkeys(("connect", "write", "pool"), connect_timeout_s)
        timeouts["read"] = read_timeout_s
        async with contextlib.AsyncExitStack() as stack:
            # Waiting for the answer's head is a read: envd sends it with the first message.
            with _unreachable(sandbox_id, connect_timeout_s, read_timeout_s):
                response = await stack.enter_async_context(
                    self._pool.stream(
                        "POST",
                        _url(sandbox_id, path),
                        headers=[*_headers(token), *headers],
                        content=content,
                        extensions={"timeout": timeouts},
                    )
                )

            async def chunks() -> AsyncGenerator[bytes, None]:
                with _unreachable(sandbox_id, connect_timeout_s, read_timeout_s):
                    async for chunk in response.aiter_stream():
                        yield chunk

            body = chunks()
            try:
                yield response.status, body
            finally:
                await body.aclose()


def _url(sandbox_id: str, path: str) -> str:
    return f"http://{sandbox_id}:{ENVD_PORT}{path}"


def _headers(token: str | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"Host", b"127.0.0.1")]
    if token is not None:
        headers.append((b"X-Access-Token", token.encode()))
    return headers


@contextlib.contextmanager
def _unreachable(
    sandbox_id: str, timeout_s: float, read_timeout_s: float | None = None
) -> Iterator[None]:
    """httpcore's failures as EnvdUnreachable; a read's timeout is `read_timeout_s` when
    given, every other one `timeout_s`."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        if read_timeout_s is not None and isinstance(exc, httpcore.ReadTimeout):
            timeout_s = read_timeout_s
        raise EnvdUnreachable(f"envd in {sandbox_id}: no answer in {timeout_s:g} s") from exc
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        # A pooled connection whose sandbox was killed or restarted envd ends as a
        # RemoteProtocolError ("disconnected without sending a response").
        raise EnvdUnreachable(f"envd in {sandbox_id}: {exc}") from exc
