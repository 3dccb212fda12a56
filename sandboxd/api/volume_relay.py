"""A gateway's content API: each request, its volume's token checked here
(sandboxd.api.volume_content.by_token), relayed to the node agent that holds the volume's files,
which runs the same endpoint on them (volume_content.trusted); the answer relayed back as the
node gave it. Bodies stream both ways, never held whole: an upload is sent on as it arrives,
a download as the node sends it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from starlette.requests import ClientDisconnect
from starlette.responses import Response, StreamingResponse

from sandboxd.api.volume_content import CHUNK, PREFIX, content_error

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator

    from starlette.requests import Request

    from sandboxd.api.context import VolumeFiles
    from sandboxd.api.volume_content import Endpoint
    from sandboxd.node.content_stream import Answer
    from sandboxd.store.rows import VolumeRow

# What a relayed request and its answer keep of their headers: the body's type and length.
RELAYED = (b"content-type", b"content-length")


class VolumeContent(Protocol):
    """Where the volumes' files are (sandboxd.cluster.volumes.ClusterVolumes)."""

    async def content(
        self,
        volume: VolumeRow,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes] | None,
    ) -> Answer:
        """The node's answer, its body left to stream.

        Raises:
            VolumeNodeUnavailable: the volume's node cannot be reached.
        """
        ...


def relayed(volumes: VolumeContent) -> VolumeFiles:
    """The content API's files, reached over the wire (the endpoint is the node's to run)."""

    async def files(request: Request, volume: VolumeRow, endpoint: Endpoint) -> Response:
        del endpoint  # the node runs it
        target = request.url.path.removeprefix(PREFIX)
        if request.url.query:
            target += "?" + request.url.query
        headers = [(k, v) for k, v in request.headers.raw if k in RELAYED]
        body: AsyncIterable[bytes] | None = None
        if "content-length" in request.headers or "transfer-encoding" in request.headers:
            body = _gathered(request.stream())
        try:
            answer = await volumes.content(volume, request.method, target, headers, body)
        except ClientDisconnect:
            return content_error(400, "the upload ended before its body did")
        kept = {k.decode(): v.decode() for k, v in answer.headers if k.lower() in RELAYED}
        return StreamingResponse(_streamed(answer), answer.status, kept)

    return files


async def _streamed(answer: Answer) -> AsyncIterator[bytes]:
    try:
        async for chunk in _gathered(answer.aiter_stream()):
            yield chunk
    finally:
        await answer.aclose()


async def _gathered(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """`chunks` passed on in pieces of CHUNK (the last may be smaller): a relayed body arrives
    in the socket's reads (64 KiB), and each piece costs a pass through both HTTP stacks."""
    pending = bytearray()
    async for chunk in chunks:
        pending += chunk
        if len(pending) >= CHUNK:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)
