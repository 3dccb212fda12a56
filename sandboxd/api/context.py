"""What the control API's endpoints work with, given to the app at construction (serve, the
composition root, makes them) and kept on `app.state`: the endpoints are module-level functions
that read it from their request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sandboxd.api.idempotency import Creates, IdempotentCreates

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from sandboxd.api.volume_content import Endpoint
    from sandboxd.builds.work import BuildWork
    from sandboxd.node.service import NodeService
    from sandboxd.store.interface import Store
    from sandboxd.store.rows import VolumeRow
    from sandboxd.templates.catalog import Templates
    from sandboxd.volumes.tokens import VolumeTokens


class Volumes(Protocol):
    """The volumes' records and tokens, as the volume endpoints use them: serve's
    sandboxd.volumes.catalog.VolumeCatalog, a gateway's sandboxd.cluster.volumes.ClusterVolumes
    (each raises as VolumeCatalog's methods say)."""

    tokens: VolumeTokens

    async def create(self, name: str, size_mb: int | None, team_id: str) -> VolumeRow: ...

    def get(self, volume_id: str, team_id: str | None = None) -> VolumeRow: ...

    def all(self, team_id: str | None = None) -> list[VolumeRow]: ...

    async def delete(self, volume_id: str, team_id: str | None = None) -> None: ...


class VolumeFiles(Protocol):
    """Run a content-API endpoint on the files of `volume` (its token checked):
    on serve's disk, or relayed by a gateway to the node that holds them."""

    async def __call__(
        self, request: Request, volume: VolumeRow, endpoint: Endpoint
    ) -> Response: ...


@dataclass(frozen=True)
class ApiContext:
    """`node` runs the sandboxes; `store` holds the API keys, templates and metrics; `builder`
    does the builds' work (serve's builder, a gateway's hand-off to node agents); `domain` is
    where the SDKs reach the sandboxes' ports (`get_host()`); `uploads_key` signs the build
    context's upload URLs; `volumes` the volumes and their tokens, `files` where the content
    API finds their files (serve's disk, or a gateway's relay to their node); a gateway's
    `creates` hold their Idempotency-Keys in the shared database."""

    node: NodeService
    store: Store
    templates: Templates
    builder: BuildWork
    domain: str
    uploads_key: bytes
    volumes: Volumes
    files: VolumeFiles
    creates: Creates = field(default_factory=IdempotentCreates)


def context(request: Request) -> ApiContext:
    """The context of the app serving `request` (set by sandboxd.api.app.create_app)."""
    found: ApiContext = request.app.state.context
    return found
