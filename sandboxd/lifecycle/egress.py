"""A sandbox's egress rules from what the API was given (its create's options, or E2B's
`PUT /sandboxes/{id}/network`), applied by the runtime's firewall (sandboxd.host.firewall)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxNotFound
from sandboxd.host.firewall import OPEN, Egress

if TYPE_CHECKING:
    from sandboxd.lifecycle.manager import SandboxManager

# What an update replaces; the rest of `network` (allowPublicTraffic, maskRequestHost) is the
# create's for good, as in E2B, where the update's body has no such fields.
UPDATED = ("allowOut", "denyOut", "dnsServers", "egressProxy", "rules")


def _ipv4(entries: list[str]) -> tuple[str, ...]:
    """The IPv4 addresses and CIDRs among `entries` (domains and IPv6 left out)."""
    found = []
    for entry in entries:
        with contextlib.suppress(ValueError):
            found.append(str(ipaddress.IPv4Network(entry, strict=False)))
    return tuple(found)


def egress_of(options: dict[str, Any]) -> Egress | None:
    """The sandbox's egress rules from its options, as E2B has them: allow_internet_access
    false is denyOut 0.0.0.0/0, and allowOut beats denyOut. None: the default (all allowed but what
    is always denied). Domains in allowOut are not enforced yet: they allow nothing (the API
    accepts them only beside denyOut 0.0.0.0/0, so what they name stays denied). A sandbox has
    no IPv6, so IPv6 entries change nothing."""
    network = options.get("network") or {}
    allow = _ipv4(network.get("allowOut") or [])
    deny = _ipv4(network.get("denyOut") or [])
    if options.get("allow_internet_access") is False:
        deny = (*deny, "0.0.0.0/0")
    return Egress(allow, deny) if allow or deny else None


def dns_servers_of(options: dict[str, Any]) -> list[str] | None:
    """The resolvers the sandbox's options name (`network.dnsServers`); None: its gateway's
    (serve's DNS forwarder)."""
    return (options.get("network") or {}).get("dnsServers") or None


def with_update(options: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A sandbox's create options after `update` (a `PUT .../network` body, unset fields left
    out): its egress fields and allow_internet_access replaced, an omitted one cleared."""
    network = {k: v for k, v in (options.get("network") or {}).items() if k not in UPDATED}
    network.update((k, update[k]) for k in UPDATED if k in update)
    updated = {k: v for k, v in options.items() if k not in ("network", "allow_internet_access")}
    if network:
        updated["network"] = network
    if "allow_internet_access" in update:
        updated["allow_internet_access"] = update["allow_internet_access"]
    return updated


async def update_network(manager: SandboxManager, sandbox_id: str, update: dict[str, Any]) -> None:
    """E2B's `PUT /sandboxes/{id}/network` on a running sandbox: its rules replaced at once
    (new connections see them), its resolv.conf rewritten if `dnsServers` changed, then its
    record.

    Raises:
        SandboxNotFound: unknown or paused (not live, as for a timeout change).
        HostError: nftables refused (the old rules stand), or resolv.conf could not be written.
    """
    sandbox = manager.existing(sandbox_id)
    async with sandbox.lock:
        if not sandbox.running:
            raise SandboxNotFound(sandbox_id)
        options = with_update(sandbox.row.options, update)
        egress = egress_of(options) or OPEN
        await asyncio.to_thread(manager.runtime.set_egress, sandbox.box, egress)
        if (dns := dns_servers_of(options)) != dns_servers_of(sandbox.row.options):
            await asyncio.to_thread(manager.runtime.set_resolvers, sandbox.box, dns)
        sandbox.row.options = options
        await manager.store.write(functools.partial(manager.store.put_sandbox, sandbox.row))
