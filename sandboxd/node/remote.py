"""`RemoteNode`: the node service of a node agent on another machine, over its internal API
(sandboxd.node.http_api), with the cluster token. Answers decode to the same models and a
domain error to the same sandboxd.errors class the node raised (sandboxd.node.wire); a node
that cannot be reached, or answers what is not the API, is a NodeUnreachable.

Calls go over kept-alive connections parsed by httptools (sandboxd.kept_http: a JSON round
trip there takes a quarter of httpcore's), a build's upload and the volumes' content
over a connection each, streamed (sandboxd.node.content_stream)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sandboxd import kept_http
from sandboxd.errors import NodeUnreachable, SandboxError
from sandboxd.node import content_stream, wire
from sandboxd.node.builds import UPLOAD_PREFIX, NodeBuilds

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator

    from sandboxd.node.models import LogEntry, SandboxConfig, SandboxInfo, SnapshotInfo
    from sandboxd.store.rows import MetricSample, SandboxRow, VolumeRow

# A create boots a sandbox (seconds, minutes with a template's start command under load); the
# other operations answer in milliseconds. A connection that cannot be made fails fast.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 600
# How long an idle connection to a node is kept for the next call (a create's then needs no
# connect); the node's API keeps its side open longer (sandboxd.daemon.node_agent), so that it
# is never the node that closes one just as a call goes out on it.
KEEPALIVE_S = 30


class RemoteNode:
    """Implements `sandboxd.node.service.NodeAgentService` and `sandboxd.node.builds.NodeBuilds`
    (and a build's upload) by calling the node `node_id` at
    `api_url` ("http://10.1.2.3:49990"). Each call raises NodeUnreachable on a transport
    failure, and otherwise what the operation raised on the node."""

    def __init__(self, node_id: str, api_url: str, token: str) -> None:
        self.node_id = node_id
        self.api_url = api_url.rstrip("/")
        self._signatures = wire.operations() | wire.operations(NodeBuilds)
        split = urlsplit(self.api_url)
        self._address = (split.hostname or "", split.port or 80)
        # The first headers of every request: its Host, and the cluster token.
        self._identity = [(b"host", split.netloc.encode()),
                          (b"authorization", f"Bearer {token}".encode())]  # fmt: skip
        self._connections = kept_http.KeptConnections(kept_http.tcp(*self._address), KEEPALIVE_S,
                                                      (CONNECT_TIMEOUT_S, READ_TIMEOUT_S))  # fmt: skip

    async def close(self) -> None:
        self._connections.close()

    async def create(self, config: SandboxConfig) -> SandboxInfo:
        return await self._call("create", config=config)  # type: ignore[no-any-return]

    async def kill(self, sandbox_id: str) -> None:
        await self._call("kill", sandbox_id=sandbox_id)

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        await self._call("pause", sandbox_id=sandbox_id, memory=memory)

    async def resume(self, sandbox_id: str, timeout_s: int) -> SandboxInfo:
        return await self._call("resume", sandbox_id=sandbox_id, timeout_s=timeout_s)  # type: ignore[no-any-return]

    async def connect(
        self, sandbox_id: str, timeout_s: int, memory: bool = True
    ) -> tuple[SandboxInfo, bool]:
        return await self._call(  # type: ignore[no-any-return]
            "connect", sandbox_id=sandbox_id, timeout_s=timeout_s, memory=memory
        )

    async def snapshot(self, sandbox_id: str, name: str | None) -> SnapshotInfo:
        return await self._call("snapshot", sandbox_id=sandbox_id, name=name)  # type: ignore[no-any-return]

    async def fork(
        self, sandbox_id: str, timeout_s: int, count: int
    ) -> list[SandboxInfo | SandboxError]:
        return await self._call(  # type: ignore[no-any-return]
            "fork", sandbox_id=sandbox_id, timeout_s=timeout_s, count=count
        )

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        await self._call("set_timeout", sandbox_id=sandbox_id, timeout_s=timeout_s)

    async def update_network(self, sandbox_id: str, update: dict[str, Any]) -> None:
        await self._call("update_network", sandbox_id=sandbox_id, update=update)

    async def list_sandboxes(self) -> list[SandboxInfo]:
        return await self._call("list_sandboxes")  # type: ignore[no-any-return]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        return await self._call("get", sandbox_id=sandbox_id)  # type: ignore[no-any-return]

    async def metrics(
        self, sandbox_id: str, start_s: int | None, end_s: int | None, team_id: str
    ) -> list[MetricSample]:
        return await self._call(  # type: ignore[no-any-return]
            "metrics", sandbox_id=sandbox_id, start_s=start_s, end_s=end_s, team_id=team_id
        )

    async def logs(
        self,
        sandbox_id: str,
        since_us: int | None,
        until_us: int | None,
        limit: int,
        newest_first: bool,
    ) -> list[LogEntry]:
        return await self._call(  # type: ignore[no-any-return]
            "logs", sandbox_id=sandbox_id, since_us=since_us, until_us=until_us, limit=limit,
            newest_first=newest_first,
        )  # fmt: skip

    async def paused_record(self, sandbox_id: str) -> SandboxRow:
        return await self._call("paused_record", sandbox_id=sandbox_id)  # type: ignore[no-any-return]

    async def adopt_paused(self, record: SandboxRow) -> SandboxInfo:
        return await self._call("adopt_paused", record=record)  # type: ignore[no-any-return]

    # sandboxd.node.builds.NodeBuilds

    async def start_build(self, template_id: str, build_id: str, recipe: dict[str, Any]) -> None:
        await self._call("start_build", template_id=template_id, build_id=build_id, recipe=recipe)

    async def upload_present(self, template_id: str, files_hash: str) -> bool:
        return await self._call(  # type: ignore[no-any-return]
            "upload_present", template_id=template_id, files_hash=files_hash
        )

    async def forget_template(self, template_id: str) -> None:
        await self._call("forget_template", template_id=template_id)

    async def upload(
        self, template_id: str, files_hash: str, body: AsyncIterator[bytes], length: int
    ) -> None:
        """Stream a build's upload of `length` bytes (its Content-Length) to the node.

        Raises:
            NodeUnreachable: a transport failure; what the node's builder raised for it.
        """
        framing = [(b"content-length", b"%d" % length), (b"expect", b"100-continue")]
        answer = await self._streamed(b"PUT", f"{UPLOAD_PREFIX}{template_id}/{files_hash}",
                                      framing, body, chunked=False)  # fmt: skip
        try:
            content = b"".join([piece async for piece in answer.aiter_stream()])
        except NodeUnreachable as exc:
            raise NodeUnreachable(f"node {self.node_id} ({self.api_url}): {exc}") from exc
        finally:
            await answer.aclose()
        self._result("upload", answer.status, content)

    # sandboxd.node.service.NodeVolumes

    async def create_volume(self, name: str, size_mb: int | None, team_id: str) -> VolumeRow:
        return await self._call(  # type: ignore[no-any-return]
            "create_volume", name=name, size_mb=size_mb, team_id=team_id
        )

    async def delete_volume(self, volume_id: str) -> None:
        await self._call("delete_volume", volume_id=volume_id)

    async def list_volumes(self) -> list[VolumeRow]:
        return await self._call("list_volumes")  # type: ignore[no-any-return]

    async def volume_content(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes] | None,
    ) -> content_stream.Answer:
        """Send a content-API request (`target`: its path under the content API and query) to
        the node, `body` streamed as it comes (chunked unless `headers` give its length); the
        answer's body is left to stream: read it with `aiter_stream()`, then `aclose()` it.

        Raises:
            NodeUnreachable: the node cannot be reached, or broke off before answering.
        """
        chunked = not any(k == b"content-length" for k, _ in headers)
        framing = [] if body is None else [(b"expect", b"100-continue")]
        if body is not None and chunked:
            framing.append((b"transfer-encoding", b"chunked"))
        return await self._streamed(method.encode(), wire.CONTENT_PREFIX + target,
                                    [*headers, *framing], body, chunked)  # fmt: skip

    async def _streamed(self, method: bytes, target: str, headers: list[tuple[bytes, bytes]],
                        body: AsyncIterable[bytes] | None,
                        chunked: bool) -> content_stream.Answer:  # fmt: skip
        """A streamed exchange, over a connection of its own that the node closes after."""
        head = kept_http.head(method, target.encode(),
                              [*self._identity, *headers, (b"connection", b"close")])  # fmt: skip
        try:
            return await content_stream.exchange(self._address, head, body, chunked,
                                                 (CONNECT_TIMEOUT_S, READ_TIMEOUT_S))  # fmt: skip
        except NodeUnreachable as exc:
            raise NodeUnreachable(f"node {self.node_id} ({self.api_url}): {exc}") from exc

    async def _call(self, operation: str, **arguments: object) -> Any:
        """POST the operation; its result decoded by the operation's return annotation.

        Raises:
            NodeUnreachable: a transport failure, or an answer that is not the API's.
            SandboxError: the class the node raised.
        """
        body = json.dumps(wire.encode(arguments)).encode()
        headers = [*self._identity, (b"content-type", b"application/json")]
        try:
            status, content = await self._connections.request(
                b"POST", (wire.PREFIX + operation).encode(), headers, body
            )
        except kept_http.Unreachable as exc:
            raise NodeUnreachable(f"node {self.node_id} ({self.api_url}): {exc}") from exc
        answer = self._result(operation, status, content)
        try:
            return wire.decode(self._signatures[operation].return_annotation, answer)
        except wire.WireError as exc:
            raise NodeUnreachable(f"node {self.node_id}: {operation}: {exc}") from exc

    def _result(self, operation: str, status: int, content: bytes) -> Any:
        """The JSON of the node's 2xx answer (None: no body).

        Raises:
            NodeUnreachable: an answer that is not the API's.
            SandboxError: the class the node raised.
        """
        try:
            answer = json.loads(content) if content else None
        except ValueError as exc:
            raise NodeUnreachable(f"node {self.node_id}: an answer that is not JSON") from exc
        if 200 <= status < 300:
            return answer
        if isinstance(answer, dict) and "code" in answer:
            raise wire.decode_error(answer)
        raise NodeUnreachable(f"node {self.node_id}: {operation}: status {status}")
