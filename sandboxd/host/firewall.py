"""sandboxd's nftables table (`inet sandboxd`) in the namespace it serves in: masquerade of the
pool's traffic, what no sandbox may ever reach, and each sandbox's egress rules. Every change is
one transaction of `nft -j -f -` (JSON), applied whole or not at all.

The table (docs/sandboxd.md, "Sandbox networking"):
- `forward`: replies to what was allowed pass; nothing enters a sandbox's interface
  unasked; a sandbox's interface jumps, through the map `egress`, to its own chain; an
  interface without one (a boot half-way) gets nothing.
- the sandbox's chain (named after its host interface): only its own source address and IPv4;
  never `always_deny` (network.md §2's ranges and the pool: the host's networks, the metadata
  service, the other sandboxes); then its allow set, its deny set, and accept.
- `input`: a sandbox reaches nothing on the host itself (sandboxd's API port, the host end's
  address, every address of the host's interfaces), replies and what sandboxd offers the
  sandboxes on their gateways (the set `offered`: protocol and port, e.g. its DNS forwarder)
  excepted; what is offered is refused to every other interface.
- `prerouting`: a sandbox's DNS to its gateway (udp and tcp port 53) is redirected to the
  forwarder's ports (sandboxd.host.dns_forwarder), which are offered.
- `postrouting`: the pool's traffic leaving through any interface that is not a sandbox's is
  masqueraded.
Refusals are ICMP "administratively prohibited": a client inside fails at once (EHOSTUNREACH)
instead of waiting out its timeout, as it would for E2B's silent drops.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandboxd.errors import HostError
from sandboxd.host.dns_forwarder import DNS_PORT
from sandboxd.host.network import IFNAME_PREFIX

if TYPE_CHECKING:
    from collections.abc import Iterable

TABLE = {"family": "inet", "table": "sandboxd"}
ANY_SANDBOX = IFNAME_PREFIX + "*"
ALWAYS_DENIED = ("10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                 "172.16.0.0/12", "192.168.0.0/16")  # fmt: skip
REFUSE = {"reject": {"type": "icmpx", "expr": "admin-prohibited"}}
OFFERED = {"match": {"op": "==", "right": "@offered", "left": {"concat": [
    {"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}}}  # fmt: skip
ESTABLISHED = {"match": {"op": "in", "left": {"ct": {"key": "state"}},
                         "right": ["established", "related"]}}  # fmt: skip


@dataclass(frozen=True)
class Egress:
    """A sandbox's own rules: `allow` (CIDRs or addresses) beats `deny`; the rest is allowed."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


OPEN = Egress()
CLOSED = Egress(deny=("0.0.0.0/0",))


def _meta(key: str, op: str, value: str) -> dict[str, Any]:
    return {"match": {"op": op, "left": {"meta": {"key": key}}, "right": value}}


def _ip(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"match": {"op": op, "left": {"payload": {"protocol": "ip", "field": field}},
                      "right": value}}  # fmt: skip


def _addr(network: ipaddress.IPv4Network) -> Any:
    if network.prefixlen == 32:
        return str(network.network_address)
    return {"prefix": {"addr": str(network.network_address), "len": network.prefixlen}}


def _networks(entries: tuple[str, ...] | list[str]) -> list[Any]:
    """Entries (CIDRs or bare addresses) as nft values, overlaps merged (an interval set
    refuses overlapping elements)."""
    nets = ipaddress.collapse_addresses(ipaddress.IPv4Network(e, strict=False) for e in entries)
    return [_addr(n) for n in nets]


def _rule(chain: str, *expr: dict[str, Any]) -> dict[str, Any]:
    return {"add": {"rule": {**TABLE, "chain": chain, "expr": list(expr)}}}


def _base_chain(name: str, kind: str, hook: str, prio: int) -> list[dict[str, Any]]:
    chain = {**TABLE, "name": name, "type": kind, "hook": hook, "prio": prio, "policy": "accept"}
    return [{"add": {"chain": chain}}, {"flush": {"chain": {**TABLE, "name": name}}}]


def apply(commands: list[dict[str, Any]]) -> None:
    """One nftables transaction.

    Raises:
        HostError: nft is missing or refused the transaction (nothing of it was applied).
    """
    try:
        done = subprocess.run(["nft", "-j", "-f", "-"], input=json.dumps({"nftables": commands}),
                              capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostError(f"nft: {exc}") from exc
    if done.returncode != 0:
        raise HostError(f"nft refused sandboxd's rules: {done.stderr.strip()}")


def _port(proto: str, port: int) -> dict[str, Any]:
    return {"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "dport"}},
                      "right": port}}  # fmt: skip


def install(
    pool: ipaddress.IPv4Network,
    offered: Iterable[tuple[str, int]] = (),
    dns: Iterable[tuple[str, int]] = (),
) -> None:
    """Create or update the table's shared part. The map `egress` and the sandboxes' chains
    are kept, so sandboxes adopted after a restart keep their rules. `offered`: the services
    ("tcp"/"udp", port) of sandboxd's that sandboxes may reach at an address of the pool (their
    gateway). `dns`: where ("tcp"/"udp", port) a sandbox's DNS to its gateway's port 53 goes
    instead (offered too).

    Raises:
        HostError: nft failed.
    """
    deny = {**TABLE, "name": "always_deny"}
    services = {**TABLE, "name": "offered"}
    dns = list(dns)
    elements = [{"concat": [proto, port]} for proto, port in {*offered, *dns}]
    commands: list[dict[str, Any]] = [
        {"add": {"table": {"family": "inet", "name": "sandboxd"}}},
        {"add": {"set": {**deny, "type": "ipv4_addr", "flags": ["interval"]}}},
        {"flush": {"set": deny}},
        {"add": {"element": {**deny, "elem": _networks([*ALWAYS_DENIED, str(pool)])}}},
        {"add": {"set": {**services, "type": ["inet_proto", "inet_service"]}}},
        {"flush": {"set": services}},
        *([{"add": {"element": {**services, "elem": elements}}}] if elements else []),
        {"add": {"map": {**TABLE, "name": "egress", "type": "ifname", "map": "verdict"}}},
        *_base_chain("forward", "filter", "forward", 0),
        _rule("forward", ESTABLISHED, {"accept": None}),
        _rule("forward", _meta("oifname", "==", ANY_SANDBOX), REFUSE),
        _rule("forward", {"vmap": {"key": {"meta": {"key": "iifname"}}, "data": "@egress"}}),
        _rule("forward", _meta("iifname", "==", ANY_SANDBOX), REFUSE),
        *_base_chain("input", "filter", "input", 0),
        _rule("input", _meta("iifname", "==", ANY_SANDBOX), ESTABLISHED, {"accept": None}),
        _rule(
            "input",
            _meta("iifname", "==", ANY_SANDBOX),
            _ip("daddr", "==", _addr(pool)),
            OFFERED,
            {"accept": None},
        ),
        _rule("input", _meta("iifname", "==", ANY_SANDBOX), REFUSE),
        _rule("input", OFFERED, REFUSE),  # sandboxes' services are theirs only
        *_base_chain("prerouting", "nat", "prerouting", -100),
        *(
            _rule(
                "prerouting",
                _meta("iifname", "==", ANY_SANDBOX),
                _ip("daddr", "==", _addr(pool)),
                _port(proto, DNS_PORT),
                {"redirect": {"port": port}},
            )
            for proto, port in dns
        ),
        *_base_chain("postrouting", "nat", "postrouting", 100),
        _rule(
            "postrouting",
            _ip("saddr", "==", _addr(pool)),
            _meta("oifname", "!=", ANY_SANDBOX),
            {"masquerade": None},
        ),
    ]
    apply(commands)


def _sandbox_rules(ifname: str, address: str, egress: Egress) -> list[dict[str, Any]]:
    rules = [
        {"flush": {"chain": {**TABLE, "name": ifname}}},
        _rule(ifname, _meta("nfproto", "!=", "ipv4"), REFUSE),
        _rule(ifname, _ip("saddr", "!=", address), {"drop": None}),  # forged: no answer owed
        _rule(ifname, _ip("daddr", "==", "@always_deny"), REFUSE),
    ]
    if egress.allow:
        rules.append(_rule(ifname, _ip("daddr", "==", {"set": _networks(egress.allow)}),
                           {"accept": None}))  # fmt: skip
    if egress.deny:
        rules.append(_rule(ifname, _ip("daddr", "==", {"set": _networks(egress.deny)}), REFUSE))
    # A verdict of its own: returning to `forward` would meet the refusal of sandboxes'
    # interfaces that have no chain.
    rules.append(_rule(ifname, {"accept": None}))
    return rules


def add_sandbox(ifname: str, address: str, egress: Egress = OPEN) -> None:
    """The sandbox's chain with `egress`, and its interface's entry in `egress`.

    Raises:
        HostError: nft failed (the table is missing: serve did not `install` it).
    """
    element = {**TABLE, "name": "egress", "elem": [[ifname, {"jump": {"target": ifname}}]]}
    apply([{"add": {"chain": {**TABLE, "name": ifname}}},
           *_sandbox_rules(ifname, address, egress),
           {"add": {"element": element}}])  # fmt: skip


def set_egress(ifname: str, address: str, egress: Egress) -> None:
    """Replace the sandbox's own rules at once (new connections see the new ones).

    Raises:
        HostError: nft failed (e.g. the sandbox's chain is gone).
    """
    apply(_sandbox_rules(ifname, address, egress))


def remove_sandbox(ifname: str) -> None:
    """Remove the sandbox's entry and chain; nothing when they (or the table) are gone.
    Each object is added before it is deleted, so that the one transaction applies whatever
    is left.

    Raises:
        HostError: nft failed.
    """
    if not table_exists():
        return
    chain = {**TABLE, "name": ifname}
    element = {**TABLE, "name": "egress", "elem": [[ifname, {"jump": {"target": ifname}}]]}
    apply([{"add": {"chain": chain}},
           {"add": {"element": element}},
           {"delete": {"element": {**TABLE, "name": "egress", "elem": [ifname]}}},
           {"flush": {"chain": chain}},
           {"delete": {"chain": chain}}])  # fmt: skip


def table_exists() -> bool:
    done = subprocess.run(["nft", "list", "table", "inet", "sandboxd"],
                          capture_output=True, check=False, timeout=30)  # fmt: skip
    return done.returncode == 0


def sandbox_entries() -> set[str]:
    """The sandbox interfaces the table has a chain or an `egress` element for (none without
    the table).

    Raises:
        HostError: nft failed or answered what is not its JSON.
    """
    if not table_exists():
        return set()
    try:
        done = subprocess.run(["nft", "-j", "list", "table", "inet", "sandboxd"],
                              capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
        objects = json.loads(done.stdout)["nftables"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        raise HostError(f"nft cannot list sandboxd's table: {exc}") from exc
    found = set()
    for obj in objects:
        if "chain" in obj:
            found.add(obj["chain"]["name"])
        elif obj.get("map", {}).get("name") == "egress":
            found.update(key for key, _ in obj["map"].get("elem", []))
    return {name for name in found if name.startswith(IFNAME_PREFIX)}
