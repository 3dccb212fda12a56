"""One sandbox as the lifecycle holds it (its record, its box on the host, its envd token and
its lock), and the create request that makes one."""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envd.http.signing import file_signature
from sandboxd.errors import WrongState
from sandboxd.guest.init import EnvdInit
from sandboxd.lifecycle.ingress import Ingress
from sandboxd.store.rows import DEFAULT_TEAM_ID, SandboxRow
from sandboxd.templates.image import DEFAULT_USER, DEFAULT_WORKDIR

if TYPE_CHECKING:
    from sandboxd.runtime.engine import Box
    from sandboxd.store.rows import TemplateRow


@dataclass(frozen=True)
class CreateRequest:
    """A validated create: what the node service hands the lifecycle (its `SandboxConfig`,
    sandboxd.node.models). `options` are the create's settings sandboxd stores and shows, under
    their wire names; of them it enforces `allow_internet_access`, `network`'s allowOut
    (addresses and domains), denyOut and dnsServers (sandboxd.lifecycle.egress) and its
    allowPublicTraffic and maskRequestHost (`ingress_of`), autoPauseMemory (false: the pause
    at endAt is to disk), autoResume (traffic resumes it: sandboxd.lifecycle.wake) and
    volumeMounts (sandboxd.lifecycle.volume_mounts), not yet mcp (only shown)."""

    template: str
    timeout_s: int
    secure: bool
    auto_pause: bool
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    team_id: str = DEFAULT_TEAM_ID  # the team whose key asked: its templates and volumes

    def row(
        self, sandbox_id: str, template: TemplateRow, started_at: int, uid_base: int | None
    ) -> SandboxRow:
        """The record of a sandbox made from this request and `template`, running from
        `started_at` for the request's timeout."""
        return SandboxRow(
            sandbox_id=sandbox_id,
            template_id=template.template_id,
            alias=template.alias,
            state="running",
            started_at=started_at,
            end_at=started_at + self.timeout_s * 1_000_000,
            timeout_s=self.timeout_s,
            secure=self.secure,
            auto_pause=self.auto_pause,
            cpu_count=template.cpu_count,
            memory_mb=template.memory_mb,
            disk_size_mb=template.disk_size_mb,
            envd_version=template.envd_version,
            metadata=dict(self.metadata),
            env_vars=dict(self.env_vars),
            options=dict(self.options),
            uid_base=uid_base,
            team_id=self.team_id,
        )


@dataclass
class Sandbox:
    row: SandboxRow
    box: Box | None  # None: paused to disk (sandboxd.lifecycle.disk_pause)
    token: str | None
    ingress: Ingress = field(default_factory=Ingress)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # A kill that could not remove everything: listed (its record stays) until a retry does,
    # but neither running nor reachable; the evictor retries it.
    dying: bool = False

    @property
    def id(self) -> str:
        return self.row.sandbox_id

    @property
    def running(self) -> bool:
        return self.row.state == "running" and not self.dying

    def live(self) -> Box:
        """Its box on the host. Raises WrongState: it is paused to disk, it has none."""
        if self.box is None:
            raise WrongState(f"Sandbox {self.id} is paused to disk")
        return self.box

    def signed(
        self, path: str, operation: str, username: str, signature: str, expiration: str | None
    ) -> bool:
        """Whether `signature` is a file URL's signature by its envd token (running only)."""
        if not self.running or self.token is None:
            return False
        expected = file_signature(path, operation, username, self.token, expiration)
        return hmac.compare_digest(expected.encode(), signature.encode())

    @property
    def envd_init(self) -> EnvdInit:
        """What its envd's /init gets (after the boot and after each resume)."""
        row = self.row
        return EnvdInit(row.env_vars, row.default_user or DEFAULT_USER,
                        row.default_workdir or DEFAULT_WORKDIR, self.token)  # fmt: skip


def ingress_of(row: SandboxRow, traffic_token: str) -> Ingress:
    """The proxy's rules for the sandbox's own ports, from its create's `network`: the traffic
    token when public traffic is off, and maskRequestHost."""
    network = row.options.get("network") or {}
    return Ingress(
        traffic_token if network.get("allowPublicTraffic") is False else None,
        network.get("maskRequestHost") or None,
    )
