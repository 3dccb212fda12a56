"""What a node takes as a sandbox's disk size and egress rules, for the API to refuse a request
before it reaches one: its disk's smallest size (sandboxd.host.disk) and the rules its firewall
and egress proxy enforce (sandboxd.network), checked as E2B's API checks them
(validateEgressRules). Each check raises ValueError saying which field is wrong and why."""

from __future__ import annotations

import ipaddress

from sandboxd.host.disk import MIN_DISK_MB
from sandboxd.network.egress_proxy.names import is_domain_entry, is_name, normalize

ANY_IPV4 = "0.0.0.0/0"


def check_disk_mb(disk_mb: int | None) -> None:
    """A sandbox's disk: None (the base template's), 0 (no limit) or at least MIN_DISK_MB."""
    if disk_mb is not None and 0 < disk_mb < MIN_DISK_MB:
        raise ValueError(f"diskSizeMB: 0 (no limit) or at least {MIN_DISK_MB}")


def check_proxy_address(address: str) -> None:
    """An egress proxy's `host:port` (host an IPv4 address or a name)."""
    host, _, port = address.rpartition(":")
    if not (host and port.isdigit() and 0 < int(port) < 65536 and _is_host(host)):
        raise ValueError(f"address: {address!r} is not host:port (IPv4 or a name)")


def check_egress(allow_out: list[str], deny_out: list[str], dns_servers: list[str]) -> None:
    """Addresses must be specified ones (0.0.0.0/0 aside), denyOut holds no domains, domains in
    allowOut need everything else denied, and resolvers are IPv4 addresses."""
    for entry in deny_out:
        if not _is_specified_ip(entry):
            raise ValueError(f"denyOut: {entry!r} is not an IP address or CIDR")
    for entry in allow_out:
        if _is_ip(entry) and not _is_specified_ip(entry):
            raise ValueError(f"allowOut: {entry!r} is not a usable IP address or CIDR")
        if not _is_ip(entry) and not is_domain_entry(entry):
            raise ValueError(f"allowOut: {entry!r} is not an IP address, CIDR or domain")
    has_domains = any(not _is_ip(entry) for entry in allow_out)
    if has_domains and ANY_IPV4 not in deny_out:
        raise ValueError("allowOut: domains need 0.0.0.0/0 in denyOut")
    for entry in dns_servers:
        if not _is_ipv4_address(entry):
            raise ValueError(f"dnsServers: {entry!r} is not an IPv4 address")


def _is_host(host: str) -> bool:
    return _is_ipv4_address(host) or is_name(normalize(host))


def _is_ip(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True


def _is_specified_ip(entry: str) -> bool:
    """An address or CIDR whose address is not 0.0.0.0 or :: (nftables refuses those), or
    0.0.0.0/0 itself."""
    if entry == ANY_IPV4:
        return True
    try:
        return not ipaddress.ip_interface(entry).ip.is_unspecified
    except ValueError:
        return False


def _is_ipv4_address(entry: str) -> bool:
    try:
        ipaddress.IPv4Address(entry)
    except ValueError:
        return False
    return True
