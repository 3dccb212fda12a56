"""Request bodies of the control API, validated with pydantic: a bad body is a 400 naming the
field (`validation error: timeout: ...`). Unknown fields are ignored, as the reference's Go JSON
decoding ignores them."""

from __future__ import annotations

import json
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sandboxd.api.errors import RequestError
from sandboxd.node.rules import check_disk_mb, check_egress, check_proxy_address

Model = TypeVar("Model", bound=BaseModel)
INT32_MAX = 2**31 - 1


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class AutoResume(Body):
    enabled: bool


class VolumeMount(Body):
    name: str
    path: str


class EgressProxy(Body):
    """E2B's SandboxEgressProxyConfig: the SOCKS5 server a sandbox's TCP goes through."""

    address: str
    username: str | None = None
    password: str | None = None

    @model_validator(mode="after")
    def _check_address(self) -> Self:
        check_proxy_address(self.address)
        return self


class _Egress(Body):
    """The egress fields a create's `network` and an update share, checked alike."""

    allowOut: list[str] | None = None  # camelCase: the wire's names
    denyOut: list[str] | None = None
    dnsServers: list[str] | None = None
    rules: dict[str, list[dict[str, Any]]] | None = None
    egressProxy: EgressProxy | None = None

    @model_validator(mode="after")
    def _check_egress(self) -> Self:
        check_egress(self.allowOut or [], self.denyOut or [], self.dnsServers or [])
        return self


class Network(_Egress):
    allowPublicTraffic: bool | None = None
    maskRequestHost: str | None = None


class NetworkUpdate(_Egress):
    """`PUT /sandboxes/{id}/network` (E2B's SandboxNetworkUpdateConfig): replaces the egress
    rules, a field left out is cleared."""

    allow_internet_access: bool | None = None


class NewSandbox(Body):
    templateID: str = Field(min_length=1)
    timeout: int = Field(default=15, ge=0, le=INT32_MAX)
    autoPause: bool = False
    autoPauseMemory: bool | None = None
    autoResume: AutoResume | None = None
    secure: bool = False
    allow_internet_access: bool | None = None
    network: Network | None = None
    metadata: dict[str, str] | None = None
    envVars: dict[str, str] | None = None
    mcp: dict[str, Any] | None = None
    volumeMounts: list[VolumeMount] | None = None

    @model_validator(mode="after")
    def _check_combinations(self) -> NewSandbox:
        if self.network and self.network.allowPublicTraffic is False and not self.secure:
            raise ValueError("network.allowPublicTraffic: false needs secure")
        for name, value in (self.envVars or {}).items():
            # Every command in the sandbox gets them through execve, which cannot carry these.
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"envVars: {name!r} is not a variable name (empty, = or NUL)")
            if "\0" in value:
                raise ValueError(f"envVars: the value of {name!r} holds a NUL byte")
        for name, value in (self.metadata or {}).items():
            # Stored as JSON, which a PostgreSQL store (jsonb) cannot hold a NUL in.
            if "\0" in name or "\0" in value:
                raise ValueError(f"metadata: {name!r} or its value holds a NUL byte")
        return self


class NewSandboxV2(NewSandbox):
    """`POST /v2/sandboxes`: every sandbox is secure (a `secure` field is ignored) and the
    timeout defaults to 300 s."""

    timeout: int = Field(default=300, ge=0, le=INT32_MAX)

    @model_validator(mode="before")
    @classmethod
    def _always_secure(cls, data: Any) -> Any:  # pydantic hands over the raw body
        return {**data, "secure": True} if isinstance(data, dict) else data


class Timeout(Body):
    timeout: int = Field(ge=0, le=INT32_MAX)


class ConnectV2(Body):
    """`POST /v2/sandboxes/{id}/connect`: `memory: false` asks for a cold boot from disk
    (sandboxd.lifecycle.disk_pause)."""

    timeout: int = Field(default=300, ge=0, le=INT32_MAX)
    memory: bool = True


class Resume(Body):
    timeout: int = Field(default=15, ge=0, le=INT32_MAX)
    autoPause: bool | None = None


class Pause(Body):
    """`POST /sandboxes/{id}/pause`: `memory: false` keeps only the files (a pause to disk)."""

    memory: bool = True


class NewSnapshot(Body):
    """`POST /sandboxes/{id}/snapshots` (a body is required: `{}` at least). `memory` is
    checked and accepted either way: every snapshot keeps the files, and its sandboxes boot
    cold (docs/sandboxd.md, "Snapshots")."""

    name: str | None = None
    memory: bool = True


class Fork(Body):
    """`POST /sandboxes/{id}/fork`: how many children, and each one's timeout (the reference's
    defaults; its bounds of `count` are the route's, in its words)."""

    timeout: int = Field(default=15, ge=0, le=INT32_MAX)
    count: int = 1


class TemplateSizes(Body):
    """A template's CPU, memory and disk, as a new template or build asks for them."""

    cpuCount: int = Field(default=2, ge=1, le=32)
    memoryMB: int = Field(default=1024, ge=128, le=INT32_MAX)
    # sandboxd's own: each sandbox's disk (its writable layer); absent: the base template's.
    # 0 is no limit at all, so it must be asked for.
    diskSizeMB: int | None = Field(default=None, ge=0, le=INT32_MAX)

    @model_validator(mode="after")
    def _check_sizes(self) -> Self:
        check_disk_mb(self.diskSizeMB)
        if self.cpuCount != 1 and self.cpuCount % 2:
            raise ValueError("cpuCount: must be 1 or even")
        if self.memoryMB % 2:
            raise ValueError("memoryMB: must be even")
        return self


class NewTemplate(TemplateSizes):
    alias: str = Field(min_length=1, max_length=128, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    teamID: str | None = None


class TemplateUpdate(Body):
    public: bool | None = None


def parse_body(model: type[Model], raw: bytes, *, optional: bool = False) -> Model:
    """`raw` as `model`; an empty body is `{}` when `optional`.

    Raises:
        RequestError: 400 `validation error: FIELD: reason` (or: not JSON, not an object).
    """
    if not raw.strip() and optional:
        raw = b"{}"
    try:
        data = json.loads(raw)
    except ValueError:
        raise RequestError(400, "validation error: the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise RequestError(400, "validation error: the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestError(400, f"validation error: {describe(exc)}") from None


def describe(exc: ValidationError) -> str:
    """The first error as `field.path: message` (pydantic's own text for the reason)."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class NewVolume(Body):
    """E2B's NewVolume; `sizeMB` is sandboxd's own (the SDKs never send it): the volume's size,
    by default serve's --volume-size-mb."""

    name: str
    sizeMB: int | None = None


class VolumeMetadata(Body):
    """PATCH /volumecontent/{id}/path: only the fields given change."""

    uid: int | None = None
    gid: int | None = None
    mode: int | None = None
