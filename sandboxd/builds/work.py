"""What the template-build endpoints ask of whatever runs the builds (sandboxd.api.build_routes):
serve's own builder (sandboxd.builds.builder.Builder), or a gateway's hand-off of each build to
one node agent (sandboxd.cluster.builds). Records (templates, builds, tags) the endpoints read
and write in the store themselves; this is the work that needs the build's machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.builds.recipe import Recipe
    from sandboxd.store.rows import BuildRow, LogLine


class BuildWork(Protocol):
    async def assign(self, build: BuildRow) -> None:
        """Settle, and record on the `waiting` build just requested, where it will run (a
        cluster's build no node can take now waits for one, see sandboxd.cluster.builds).

        Raises:
            StoreUnavailable.
        """
        ...

    async def present(self, template_id: str, files_hash: str) -> bool:
        """Whether the template's build context `files_hash` was uploaded where its latest
        build runs.

        Raises:
            BadUpload: a malformed hash; BuildNodeLost: that machine is gone;
                NoNodeAvailable: no machine took the build by its deadline (it ended in error).
        """
        ...

    async def receive(
        self, template_id: str, files_hash: str, body: AsyncIterator[bytes], length: int | None
    ) -> None:
        """Take the upload `body` of `length` bytes (the Content-Length) as the template's build
        context `files_hash`, where its latest build runs.

        Raises:
            BadUpload, LengthRequired, UploadTooLarge, StorageFull: as
                sandboxd.builds.uploads.Uploads.receive; BuildNodeLost: that machine is gone;
                NoNodeAvailable: as `present`.
        """
        ...

    async def start(self, build: BuildRow, recipe: Recipe) -> None:
        """Start the `waiting` build (one no machine took by its deadline ends in error
        instead, which its status shows).

        Raises:
            NotAllowed: it is not waiting; BuildNodeLost: its machine is gone.
        """
        ...

    def log_page(self, build: BuildRow, offset: int, limit: int) -> list[LogLine]:
        """At most `limit` lines of the build's log from line `offset`."""
        ...

    async def forget(self, template_id: str) -> None:
        """The template is deleted: stop its running builds, remove its uploads and the
        layers nothing uses any more."""
        ...
