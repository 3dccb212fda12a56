"""A build's recipe: the body of `POST /v2/templates/{id}/builds/{buildID}` (E2B's
TemplateBuildStartV2), validated once when the build starts, so that the builder only ever sees
steps it can run. Unknown keys are ignored (the JS SDK adds `resolveSymlinks` and `gzip` to its
steps), unknown step types and malformed arguments are refused naming the step."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

FILES_HASH = re.compile(r"^[0-9a-f]{64}$")
MODE = re.compile(r"^[0-7]{3,4}$")
STEP_TYPES = ("RUN", "COPY", "ENV", "WORKDIR", "USER")
# `e2bdev/base` is Python's default image: it means sandboxd's own base template.
E2B_BASE_IMAGE = "e2bdev/base"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class Step(_Body):
    type: str
    args: list[str] = Field(default_factory=list)
    force: bool = False
    filesHash: str | None = None
    forceUpload: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        kind, args = self.type, self.args
        if kind not in STEP_TYPES:
            raise ValueError(f"unknown step type {kind!r} (sandboxd runs {', '.join(STEP_TYPES)})")
        counts = {"RUN": (1, 2), "COPY": (2, 4), "WORKDIR": (1, 1), "USER": (1, 1)}
        if kind == "ENV":
            if not args or len(args) % 2:
                raise ValueError("ENV: args are name, value pairs")
            if any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in args[::2]):
                raise ValueError("ENV: a name is not a shell variable name")
        else:
            low, high = counts[kind]
            if not low <= len(args) <= high:
                raise ValueError(f"{kind}: {low} to {high} args, not {len(args)}")
            if not args[0]:
                raise ValueError(f"{kind}: the first arg is empty")
        if kind == "COPY":
            if self.filesHash is None or not FILES_HASH.match(self.filesHash):
                raise ValueError("COPY: filesHash must be 64 lower-case hex digits")
            mode = args[3] if len(args) > 3 else ""
            if mode and not MODE.match(mode):
                raise ValueError(f"COPY: mode {mode!r} is not an octal mode")
        return self

    def key(self) -> dict[str, object]:
        """What of the step decides its result (a cache key's part): not `force`."""
        return {"type": self.type, "args": self.args, "filesHash": self.filesHash}


class RegistryCredentials(_Body):
    type: Literal["registry", "aws", "gcp"]
    username: str | None = None
    password: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.type != "registry":
            raise ValueError(f"{self.type} registries are not supported by sandboxd")
        if not self.username or not self.password:
            raise ValueError("a registry login needs username and password")
        return self


class Recipe(_Body):
    fromImage: str | None = Field(default=None, min_length=1, max_length=1024)
    fromTemplate: str | None = Field(default=None, min_length=1, max_length=256)
    fromImageRegistry: RegistryCredentials | None = None
    force: bool = False
    startCmd: str | None = None
    readyCmd: str | None = None
    steps: list[Step] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.fromImage is None) == (self.fromTemplate is None):
            raise ValueError("exactly one of fromImage and fromTemplate")
        return self

    @property
    def from_base(self) -> bool:
        """The base is sandboxd's own base template (`fromImage: e2bdev/base`)."""
        image = self.fromImage or ""
        return image == E2B_BASE_IMAGE or image.startswith(E2B_BASE_IMAGE + ":")
