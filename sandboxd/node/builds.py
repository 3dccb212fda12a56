"""The node agent's part of a cluster's template builds: a gateway hands each build to one
node (sandboxd.cluster.builds), which keeps its uploads, runs it with its own builder, and
writes its status and log to the shared database as serve writes them to its own. Operations
of the node-internal API like the node service's (sandboxd.node.http_api); the upload's body,
streamed, has a route of its own (UPLOAD_PREFIX)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pydantic

from sandboxd.builds.recipe import Recipe
from sandboxd.errors import NotAllowed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.builds.builder import Builder
    from sandboxd.templates.catalog import Templates

# PUT UPLOAD_PREFIX{template_id}/{files_hash}, the build context's tar as its body (with its
# Content-Length): a build's upload, relayed by the gateway that signed its URL.
UPLOAD_PREFIX = "/node/v1/uploads/"


class NodeBuilds(Protocol):
    async def start_build(self, template_id: str, build_id: str, recipe: dict[str, Any]) -> None:
        """Run the template's `waiting` build of the shared database with `recipe` (E2B's
        start body, as the gateway validated it).

        Raises:
            TemplateNotFound, NotFound: no such template or build; NotAllowed: not waiting,
            or not a recipe.
        """
        ...

    async def upload_present(self, template_id: str, files_hash: str) -> bool:
        """Whether the template's build context `files_hash` was uploaded here.

        Raises:
            BadUpload: a malformed hash.
        """
        ...

    async def forget_template(self, template_id: str) -> None:
        """The template is deleted: stop its builds here, remove its uploads and the layers
        nothing uses any more."""
        ...


class LocalBuilds:
    """Implements NodeBuilds with this node's builder over the shared records."""

    def __init__(self, builder: Builder, templates: Templates) -> None:
        self.builder = builder
        self.templates = templates

    async def start_build(self, template_id: str, build_id: str, recipe: dict[str, Any]) -> None:
        build = self.templates.build(template_id, build_id)
        try:
            steps = Recipe.model_validate(recipe)
        except pydantic.ValidationError as exc:
            raise NotAllowed(f"not a build's recipe: {exc}") from exc
        await self.builder.start(build, steps)

    async def upload_present(self, template_id: str, files_hash: str) -> bool:
        return await self.builder.present(template_id, files_hash)

    async def forget_template(self, template_id: str) -> None:
        await self.builder.forget(template_id)

    async def receive(
        self, template_id: str, files_hash: str, body: AsyncIterator[bytes], length: int | None
    ) -> None:
        """The upload route's (UPLOAD_PREFIX). Raises what Builder.receive raises."""
        await self.builder.receive(template_id, files_hash, body, length)
