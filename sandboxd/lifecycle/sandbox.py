"""One sandbox as the lifecycle holds it (its record, its box on the host, its envd token and
its lock), and the create request that makes one."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandboxd.host.firewall import Egress
from sandboxd.proxy.routing import Ingress
from sandboxd.store import SandboxRow

if TYPE_CHECKING:
    from sandboxd.host.runtime import Box
    from sandboxd.store import TemplateRow


@dataclass(frozen=True)
class CreateRequest:
    """A validated create: what the API hands the lifecycle. `options` are the create's
    settings sandboxd stores and shows, under their wire names; of them it enforces
    `allow_internet_access`, `network`'s allowOut and denyOut addresses (`egress_of`) and its
    allowPublicTraffic and maskRequestHost (`ingress_of`), not yet mcp, volumeMounts,
    autoResume or autoPauseMemory."""

    template: str
    timeout_s: int
    secure: bool
    auto_pause: bool
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

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
        )


@dataclass
class Sandbox:
    row: SandboxRow
    box: Box
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


def ingress_of(row: SandboxRow, traffic_token: str) -> Ingress:
    """The proxy's rules for the sandbox's own ports, from its create's `network`: the traffic
    token when public traffic is off, and maskRequestHost."""
    network = row.options.get("network") or {}
    return Ingress(
        traffic_token if network.get("allowPublicTraffic") is False else None,
        network.get("maskRequestHost") or None,
    )


def _ipv4(entries: list[str]) -> tuple[str, ...]:
    """The IPv4 addresses and CIDRs among `entries` (domains and IPv6 left out)."""
    found = []
    for entry in entries:
        with contextlib.suppress(ValueError):
            found.append(str(ipaddress.IPv4Network(entry, strict=False)))
    return tuple(found)


def egress_of(options: dict[str, Any]) -> Egress | None:
    """The sandbox's egress rules from its create's options, as E2B has them: allow_internet_access false
    is denyOut 0.0.0.0/0, and allowOut beats denyOut. None: the default (all allowed but what
    is always denied). Domains in allowOut are not enforced yet: they allow nothing (the API
    accepts them only beside denyOut 0.0.0.0/0, so what they name stays denied). A sandbox has
    no IPv6, so IPv6 entries change nothing."""
    network = options.get("network") or {}
    allow = _ipv4(network.get("allowOut") or [])
    deny = _ipv4(network.get("denyOut") or [])
    if options.get("allow_internet_access") is False:
        deny = (*deny, "0.0.0.0/0")
    return Egress(allow, deny) if allow or deny else None
