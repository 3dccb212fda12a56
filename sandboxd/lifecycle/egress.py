"""A sandbox's egress rules from what the API was given (its create's options, or E2B's
`PUT /sandboxes/{id}/network`), applied by the runtime's firewall (sandboxd.network.firewall)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
from typing import TYPE_CHECKING, Any

from sandboxd.errors import SandboxError, SandboxNotFound
from sandboxd.network.egress_proxy.names import is_domain_entry, normalize
from sandboxd.network.firewall import OPEN, Egress, Tunnel
from sandboxd.network.live_rules import set_egress

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sandboxd.lifecycle.manager import SandboxManager
    from sandboxd.lifecycle.sandbox import Sandbox
    from sandboxd.runtime.engine import Box, Runtime

log = logging.getLogger("sandboxd.lifecycle.egress")

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
    false is denyOut 0.0.0.0/0, and allowOut (addresses, CIDRs and domains) beats denyOut; with
    domains, `dnsServers` are allowed (absent: nothing more, its gateway's DNS forwarder needs
    no opening); `egressProxy` is the tunnel for its TCP. None: the default (all allowed but what
    is always denied, directly). A sandbox has no IPv6, so IPv6 entries change nothing."""
    network = options.get("network") or {}
    allow_out = network.get("allowOut") or []
    allow = _ipv4(allow_out)
    domains = tuple(normalize(e) for e in allow_out if is_domain_entry(e))
    deny = _ipv4(network.get("denyOut") or [])
    if options.get("allow_internet_access") is False:
        deny = (*deny, "0.0.0.0/0")
    servers = network.get("dnsServers")
    resolvers = None if servers is None else _ipv4(servers)
    tunnel = _tunnel(network.get("egressProxy"))
    if allow or deny or domains or tunnel:
        return Egress(allow, deny, domains, resolvers, tunnel)
    return None


def _tunnel(config: dict[str, Any] | None) -> Tunnel | None:
    """`egressProxy` (`{address: "host:port", username?, password?}`, checked by the API)."""
    if not config:
        return None
    host, port = config["address"].rsplit(":", 1)
    return Tunnel(host, int(port), config.get("username"), config.get("password"))


async def apply_network(runtime: Runtime, box: Box, options: dict[str, Any]) -> None:
    """A new sandbox's egress rules and resolvers from its create's `options` (a warm sandbox
    was booted with neither: open, naming its gateway).

    Raises:
        HostError: nftables refused, or resolv.conf could not be written.
    """
    if (egress := egress_of(options)) is not None:
        await asyncio.to_thread(set_egress, box.net, egress, runtime.egress_proxy)
    if (dns := dns_servers_of(options)) is not None:
        await asyncio.to_thread(runtime.set_resolvers, box, dns)


async def restore_proxied(manager: SandboxManager, sandboxes: Iterable[Sandbox]) -> None:
    """Give adopted sandboxes with domain rules or a tunnel back to the domain proxy (a new one,
    on a new port: its view and their redirects are made again)."""
    for sandbox in sandboxes:
        egress = egress_of(sandbox.row.options)
        if sandbox.box is not None and egress is not None and (egress.domains or egress.tunnel):
            try:
                await asyncio.to_thread(
                    set_egress, sandbox.box.net, egress, manager.runtime.egress_proxy
                )
            except SandboxError:  # its old redirect goes to no proxy: refused, not let through
                log.exception("sandbox %s: its proxied egress was not restored", sandbox.id)


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
        box = sandbox.live()
        await asyncio.to_thread(set_egress, box.net, egress, manager.runtime.egress_proxy)
        if (dns := dns_servers_of(options)) != dns_servers_of(sandbox.row.options):
            await asyncio.to_thread(manager.runtime.set_resolvers, box, dns)
        sandbox.row.options = options
        await manager.store.write(functools.partial(manager.store.put_sandbox, sandbox.row))
