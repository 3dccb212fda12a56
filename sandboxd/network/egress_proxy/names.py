"""Domain entries of `allowOut` and how a name matches them, as E2B's egress proxy has it
(e2b-dev/infra orchestrator tcpfirewall `matchDomain`): an exact name, `*.example.com` for its
subdomains at any depth (not the apex), or `*` for any name; case-insensitive. A trailing dot (the
absolute form) is the same name."""

from __future__ import annotations

import ipaddress
import re

LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
MAX_NAME = 253
ANY = "*"
WILDCARD = "*."


def normalize(name: str) -> str:
    """Lower case, without the absolute form's trailing dot."""
    name = name.lower()
    return name.removesuffix(".")


def is_name(name: str) -> bool:
    """Whether `name` (normalized) is a DNS name: dot-separated labels of letters, digits, `-`
    and `_` (service labels), at most 253 characters."""
    if not name or len(name) > MAX_NAME:
        return False
    return all(LABEL.match(label) for label in name.split("."))


def is_domain_entry(entry: str) -> bool:
    """Whether `entry` is a domain an `allowOut` may hold: a name, `*.` and a name, or `*` (an
    address or CIDR is not)."""
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        pass
    else:
        return False
    entry = normalize(entry)
    return entry == ANY or is_name(entry.removeprefix(WILDCARD))


def matches(name: str, entry: str) -> bool:
    """Whether host name `name` (from a Host header or SNI) is allowed by domain `entry`."""
    name, entry = normalize(name), normalize(entry)
    if not name:
        return False
    if entry == ANY:
        return True
    if entry.startswith(WILDCARD):
        return name.endswith(entry[1:])  # ".example.com": a subdomain, never the apex
    return name == entry
