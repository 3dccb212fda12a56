"""What the domain proxy does with one connection, decided as E2B's egress proxy decides
(e2b-dev/infra orchestrator tcpfirewall `isEgressAllowed`): an `allowOut` address or CIDR holding
the destination allows it as addressed; a name matching an `allowOut` domain allows the name,
dialled at its own addresses (never at the destination the client chose, so a forged SNI or Host
reaches only what the name resolves to); otherwise a `denyOut` CIDR holding the destination
refuses it, and the rest is allowed as addressed."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.network.egress_proxy.names import matches

if TYPE_CHECKING:
    from sandboxd.network.firewall import Tunnel

Networks = tuple[ipaddress.IPv4Network, ...]


def networks(entries: tuple[str, ...]) -> Networks:
    return tuple(ipaddress.IPv4Network(e, strict=False) for e in entries)


@dataclass(frozen=True)
class SandboxRules:
    """One sandbox's rules as the proxy holds them, with the address its connections arrive
    at (the host end of its veth: a redirect leaves them addressed there) and the SOCKS5 server
    its connections go through, if any."""

    gateway: ipaddress.IPv4Address
    allow: Networks
    deny: Networks
    domains: tuple[str, ...]
    tunnel: Tunnel | None = None


@dataclass(frozen=True)
class Verdict:
    """Dial `address` (the original destination), or `name` (resolved by the proxy), or
    neither: refused."""

    address: ipaddress.IPv4Address | None = None
    name: str | None = None


REFUSED = Verdict()


def _within(address: ipaddress.IPv4Address, nets: Networks) -> bool:
    return any(address in net for net in nets)


def decide(rules: SandboxRules, destination: ipaddress.IPv4Address, name: str | None) -> Verdict:
    """The verdict on a connection to `destination` asking for `name` (None: none seen)."""
    if _within(destination, rules.allow):
        return Verdict(address=destination)
    if name is not None and any(matches(name, entry) for entry in rules.domains):
        return Verdict(name=name)
    if _within(destination, rules.deny):
        return REFUSED
    return Verdict(address=destination)


def usable(address: ipaddress.IPv4Address, never: Networks) -> bool:
    """Whether the proxy may dial `address` (never one of the always-denied ranges or the pool:
    a name may resolve to anything, the host's networks and the metadata service included)."""
    return not _within(address, never)
