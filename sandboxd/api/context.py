"""What the control API's endpoints work with, given to the app at construction (serve, the
composition root, makes them) and kept on `app.state`: the endpoints are module-level functions
that read it from their request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandboxd.api.errors import RequestError
from sandboxd.api.idempotency import Creates, IdempotentCreates

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.builds.work import BuildWork
    from sandboxd.node.service import NodeService
    from sandboxd.store.interface import Store
    from sandboxd.templates.catalog import Templates
    from sandboxd.volumes.catalog import VolumeCatalog


@dataclass(frozen=True)
class ApiContext:
    """`node` runs the sandboxes; `store` holds the API keys, templates and metrics; `builder`
    does the builds' work (serve's builder, a gateway's hand-off to node agents); `domain` is
    where the SDKs reach the sandboxes' ports (`get_host()`); `uploads_key` signs the build
    context's upload URLs; `volumes` the volumes and their tokens. A gateway (sandboxd.cluster)
    has no volumes: their endpoints answer 501 there; its `creates` hold their Idempotency-Keys
    in the shared database."""

    node: NodeService
    store: Store
    templates: Templates
    builder: BuildWork
    domain: str
    uploads_key: bytes
    volumes: VolumeCatalog | None
    creates: Creates = field(default_factory=IdempotentCreates)

    def volume_catalog(self) -> VolumeCatalog:
        """Raises RequestError 501 where volumes are not kept (a gateway)."""
        if self.volumes is None:
            raise RequestError(501, "volumes are not served by a sandboxd gateway")
        return self.volumes


def context(request: Request) -> ApiContext:
    """The context of the app serving `request` (set by sandboxd.api.app.create_app)."""
    found: ApiContext = request.app.state.context
    return found
