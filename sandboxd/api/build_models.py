"""Request bodies of the template-build endpoints (E2B's v3 build flow and tags), validated as
the other bodies are (sandboxd.api.request_models)."""

from __future__ import annotations

from pydantic import Field

from sandboxd.api.request_models import Body, TemplateSizes


class NewBuild(TemplateSizes):
    """`POST /v3/templates` (`diskSizeMB` is sandboxd's own, as on `POST /v2/templates`)."""

    name: str = Field(min_length=1, max_length=128)
    tags: list[str] = Field(default_factory=list, max_length=64)


class AssignTags(Body):
    target: str = Field(min_length=1, max_length=256)
    tags: list[str] = Field(min_length=1, max_length=64)


class RemoveTags(Body):
    name: str = Field(min_length=1, max_length=256)
    tags: list[str] = Field(min_length=1, max_length=64)
