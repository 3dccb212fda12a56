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
  address, every address of the host's interfaces), but for replies to what the host opened
  and each service sandboxd offers on the gateways to the sandboxes whose rules allow it: the
  DNS forwarder's ports to those not in `no_dns`, the domain proxy's port to those in `proxied`
  (their egress has domains or a tunnel). A sandbox's own flows are judged packet by packet.
  What is offered (the set `offered`) is refused to every other interface.
- `prerouting` (nat): a sandbox's DNS to its gateway (udp and tcp port 53) is redirected to the
  forwarder's ports (sandboxd.network.dns_forwarder), unless it is in `no_dns`. Then a sandbox's
  interface jumps, through the map `redirect`, to its chain `IFNAME_nat`, which sends its TCP
  to ports 80 and 443 to the domain proxy (sandboxd.network.egress_proxy) when its `allowOut` names
  domains, and all its TCP with an `egressProxy` (the proxy tunnels it); never what
  `always_deny` holds or an address of the host's (those meet the filter's refusals as before).
- `output`: the domain proxy's own connections (marked PROXY_MARK) reach neither `always_deny`
  nor the host's own addresses, whatever a name resolves to.
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
from sandboxd.network.dns_forwarder import DNS_PORT
from sandboxd.network.slots import IFNAME_PREFIX

if TYPE_CHECKING:
    from collections.abc import Iterable

TABLE = {"family": "inet", "table": "sandboxd"}
ANY_SANDBOX = IFNAME_PREFIX + "*"
# E2B's DeniedSandboxCIDRs; 0.0.0.0/8 is "this host" to a connect().
ALWAYS_DENIED = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                 "172.16.0.0/12", "192.168.0.0/16")  # fmt: skip
PROXIED_PORTS = (80, 443)  # E2B's: HTTP (Host header) and TLS (SNI) go to the domain proxy
PROXY_MARK = 0x5BD0  # the domain proxy's sockets (SO_MARK), for the `output` guard
REFUSE = {"reject": {"type": "icmpx", "expr": "admin-prohibited"}}
OFFERED = {"match": {"op": "==", "right": "@offered", "left": {"concat": [
    {"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}}}  # fmt: skip
ESTABLISHED = {"match": {"op": "in", "left": {"ct": {"key": "state"}},
                         "right": ["established", "related"]}}  # fmt: skip
# What comes back in a connection the host opened (envd's port, through serve's proxy). A
# sandbox's own flows to the host are judged packet by packet: one opened before its rules
# changed gets no more than a new one would.
REPLY = {"match": {"op": "==", "left": {"ct": {"key": "direction"}}, "right": "reply"}}
PROXIED = {"match": {"op": "==", "left": {"meta": {"key": "mark"}}, "right": PROXY_MARK}}
HOST_LOCAL = {"match": {"op": "==", "left": {"fib": {"result": "type", "flags": ["daddr"]}},
                        "right": "local"}}  # fmt: skip


@dataclass(frozen=True)
class Tunnel:
    """`egressProxy`: the SOCKS5 server every permitted TCP connection goes through."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class Egress:
    """A sandbox's own rules: `allow` (CIDRs or addresses) and `domains` (allowOut's names,
    matched by the domain proxy on ports 80 and 443) beat `deny`; the rest is allowed. With
    domains, the `resolvers` are allowed too (`dnsServers`; None: only its gateway's DNS
    forwarder, which `input` offers anyway). With
    a `tunnel`, all its TCP goes to the domain proxy, which dials through the tunnel."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    resolvers: tuple[str, ...] | None = None
    tunnel: Tunnel | None = None

    @property
    def reaches_nothing(self) -> bool:
        """Every address denied and none allowed: such a sandbox gets no DNS either (its
        queries could carry data out)."""
        denied_all = any(ipaddress.IPv4Network(d, strict=False).prefixlen == 0 for d in self.deny)
        return denied_all and not (self.allow or self.domains)


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


def never_reachable(pool: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Network, ...]:
    """What `always_deny` holds: ALWAYS_DENIED and the pool."""
    return (*(ipaddress.IPv4Network(e) for e in ALWAYS_DENIED), pool)


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


def _services(ports: Iterable[tuple[str, int]]) -> list[Any]:
    return [{"concat": [proto, port]} for proto, port in ports]


def _offered_to(
    pool: ipaddress.IPv4Network, sandboxes: dict[str, Any], ports: list[tuple[str, int]]
) -> list[dict[str, Any]]:
    """The input rule letting the `sandboxes` (a match on the interface) reach `ports` at an
    address of the pool; none without ports."""
    if not ports:
        return []
    services = {"match": {"op": "==", "right": {"set": _services(ports)}, "left": {"concat": [
        {"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}}}  # fmt: skip
    return [_rule("input", _meta("iifname", "==", ANY_SANDBOX), sandboxes,
                  _ip("daddr", "==", _addr(pool)), services, {"accept": None})]  # fmt: skip


def install(
    pool: ipaddress.IPv4Network,
    dns: Iterable[tuple[str, int]] = (),
    proxy_port: int | None = None,
) -> None:
    """Create or update the table's shared part. The maps `egress` and `redirect`, the sets
    `no_dns` and `proxied` and the sandboxes' chains are kept, so sandboxes adopted after a
    restart keep their rules. `dns`: where ("tcp"/"udp", port) a sandbox's DNS to its gateway's
    port 53 goes instead, offered to the sandboxes not in `no_dns`; `proxy_port`: the domain
    proxy's, offered to the sandboxes in `proxied` (their redirects go there). Both are reached
    at an address of the pool (the redirects give a sandbox's own gateway).

    Raises:
        HostError: nft failed.
    """
    deny = {**TABLE, "name": "always_deny"}
    services = {**TABLE, "name": "offered"}
    dns = list(dns)
    proxy = [] if proxy_port is None else [("tcp", proxy_port)]
    elements = _services({*dns, *proxy})
    commands: list[dict[str, Any]] = [
        {"add": {"table": {"family": "inet", "name": "sandboxd"}}},
        {"add": {"set": {**deny, "type": "ipv4_addr", "flags": ["interval"]}}},
        {"flush": {"set": deny}},
        {"add": {"element": {**deny, "elem": _networks([*ALWAYS_DENIED, str(pool)])}}},
        {"add": {"set": {**services, "type": ["inet_proto", "inet_service"]}}},
        {"flush": {"set": services}},
        *([{"add": {"element": {**services, "elem": elements}}}] if elements else []),
        # Not flushed (nor `redirect`): their elements are the sandboxes', kept for adoption as
        # their chains are.
        {"add": {"map": {**TABLE, "name": "egress", "type": "ifname", "map": "verdict"}}},
        {"add": {"set": {**TABLE, "name": "no_dns", "type": "ifname"}}},
        {"add": {"set": {**TABLE, "name": "proxied", "type": "ifname"}}},
        *_base_chain("forward", "filter", "forward", 0),
        _rule("forward", ESTABLISHED, {"accept": None}),
        _rule("forward", _meta("oifname", "==", ANY_SANDBOX), REFUSE),
        _rule("forward", {"vmap": {"key": {"meta": {"key": "iifname"}}, "data": "@egress"}}),
        _rule("forward", _meta("iifname", "==", ANY_SANDBOX), REFUSE),
        *_base_chain("input", "filter", "input", 0),
        _rule("input", _meta("iifname", "==", ANY_SANDBOX), ESTABLISHED, REPLY, {"accept": None}),
        *_offered_to(pool, _meta("iifname", "!=", "@no_dns"), dns),
        *_offered_to(pool, _meta("iifname", "==", "@proxied"), proxy),
        _rule("input", _meta("iifname", "==", ANY_SANDBOX), REFUSE),
        _rule("input", OFFERED, REFUSE),  # sandboxes' services are theirs only
        {"add": {"map": {**TABLE, "name": "redirect", "type": "ifname", "map": "verdict"}}},
        *_base_chain("prerouting", "nat", "prerouting", -100),
        # DNS first: the gateways are in the pool, which always_deny holds.
        *(
            _rule(
                "prerouting",
                _meta("iifname", "==", ANY_SANDBOX),
                _meta("iifname", "!=", "@no_dns"),
                _ip("daddr", "==", _addr(pool)),
                _port(proto, DNS_PORT),
                {"redirect": {"port": port}},
            )
            for proto, port in dns
        ),
        _rule("prerouting", _ip("daddr", "==", "@always_deny"), {"return": None}),
        _rule("prerouting", HOST_LOCAL, {"return": None}),
        _rule("prerouting", {"vmap": {"key": {"meta": {"key": "iifname"}}, "data": "@redirect"}}),
        *_base_chain("output", "filter", "output", 0),
        _rule("output", PROXIED, _ip("daddr", "==", "@always_deny"), REFUSE),
        _rule("output", PROXIED, HOST_LOCAL, REFUSE),
        *_base_chain("postrouting", "nat", "postrouting", 100),
        _rule(
            "postrouting",
            _ip("saddr", "==", _addr(pool)),
            _meta("oifname", "!=", ANY_SANDBOX),
            {"masquerade": None},
        ),
    ]
    apply(commands)


NAT_SUFFIX = "_nat"


def _nat_chain(ifname: str) -> str:
    return ifname + NAT_SUFFIX


def _sandbox_rules(
    ifname: str, address: str, egress: Egress, proxy_port: int | None
) -> list[dict[str, Any]]:
    """Both of the sandbox's chains refilled: one transaction changes what it may reach and what
    is proxied together. The filter chain must exist (a killed sandbox's rules are not made
    again); the nat chain is made when missing (a sandbox booted by a sandboxd before it)."""
    nat = _nat_chain(ifname)
    allow = egress.allow
    if egress.domains:
        allow = (*allow, *(egress.resolvers or ()))
    rules = [
        {"flush": {"chain": {**TABLE, "name": ifname}}},
        _rule(ifname, _meta("nfproto", "!=", "ipv4"), REFUSE),
        _rule(ifname, _ip("saddr", "!=", address), {"drop": None}),  # forged: no answer owed
        _rule(ifname, _ip("daddr", "==", "@always_deny"), REFUSE),
    ]
    if allow:
        rules.append(_rule(ifname, _ip("daddr", "==", {"set": _networks(allow)}),
                           {"accept": None}))  # fmt: skip
    if egress.deny:
        rules.append(_rule(ifname, _ip("daddr", "==", {"set": _networks(egress.deny)}), REFUSE))
    # A verdict of its own: returning to `forward` would meet the refusal of sandboxes'
    # interfaces that have no chain.
    rules.append(_rule(ifname, {"accept": None}))
    rules += _member("no_dns", ifname, egress.reaches_nothing)
    proxied = proxy_port is not None and bool(egress.domains or egress.tunnel)
    rules += _member("proxied", ifname, proxied)
    element = {**TABLE, "name": "redirect", "elem": [[ifname, {"jump": {"target": nat}}]]}
    rules += [{"add": {"chain": {**TABLE, "name": nat}}},
              {"flush": {"chain": {**TABLE, "name": nat}}},
              {"add": {"element": element}}]  # fmt: skip
    if proxied:
        port = {"payload": {"protocol": "tcp", "field": "dport"}}
        tcp = {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}
        web = {"match": {"op": "==", "left": port, "right": {"set": PROXIED_PORTS}}}
        rules.append(_rule(nat, _ip("saddr", "==", address), tcp if egress.tunnel else web,
                           {"redirect": {"port": proxy_port}}))  # fmt: skip
    return rules


def _member(name: str, ifname: str, member: bool) -> list[dict[str, Any]]:
    """The interface in the set `name`, or out of it (added first, so the delete never fails on
    an element that is not there)."""
    element = {"element": {**TABLE, "name": name, "elem": [ifname]}}
    return [{"add": element}] if member else [{"add": element}, {"delete": element}]


def add_sandbox(ifname: str, address: str, egress: Egress = OPEN) -> None:
    """The sandbox's chains with `egress`, and its interface's entries in `egress` and
    `redirect`.

    Raises:
        HostError: nft failed (the table is missing: serve did not `install` it).
    """
    element = {**TABLE, "name": "egress", "elem": [[ifname, {"jump": {"target": ifname}}]]}
    apply([{"add": {"chain": {**TABLE, "name": ifname}}},
           *_sandbox_rules(ifname, address, egress, None),
           {"add": {"element": element}}])  # fmt: skip


def set_egress(ifname: str, address: str, egress: Egress, proxy_port: int | None = None) -> None:
    """Replace the sandbox's own rules at once (new connections see the new ones); its TCP to
    ports 80 and 443 goes to the domain proxy at `proxy_port` when `egress` has domains.

    Raises:
        HostError: nft failed (e.g. the sandbox's chain is gone).
    """
    apply(_sandbox_rules(ifname, address, egress, proxy_port))


def remove_sandbox(ifname: str) -> None:
    """Remove the sandbox's entries and chains; nothing when they (or the table) are gone.
    Each object is added before it is deleted, so that the one transaction applies whatever
    is left.

    Raises:
        HostError: nft failed.
    """
    if not table_exists():
        return
    commands = [*_member("no_dns", ifname, False), *_member("proxied", ifname, False)]
    for chain, verdicts in ((ifname, "egress"), (_nat_chain(ifname), "redirect")):
        entry = [ifname, {"jump": {"target": chain}}]
        commands += [{"add": {"chain": {**TABLE, "name": chain}}},
                     {"add": {"element": {**TABLE, "name": verdicts, "elem": [entry]}}},
                     {"delete": {"element": {**TABLE, "name": verdicts, "elem": [ifname]}}},
                     {"flush": {"chain": {**TABLE, "name": chain}}},
                     {"delete": {"chain": {**TABLE, "name": chain}}}]  # fmt: skip
    apply(commands)


def table_exists() -> bool:
    """Whether serve installed the table here. Its small set `always_deny` stands for it:
    listing the whole table prints every sandbox's chain (0.15-0.2 s with 1000 of them; the
    set, 3 ms: bench.firewall_update)."""
    done = subprocess.run(["nft", "list", "set", "inet", "sandboxd", "always_deny"],
                          capture_output=True, check=False, timeout=30)  # fmt: skip
    return done.returncode == 0


def sandbox_entries() -> set[str]:
    """The sandbox interfaces the table has a chain (filter or nat) or an element of `egress`,
    `redirect`, `no_dns` or `proxied` for (none without the table).

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
            found.add(obj["chain"]["name"].removesuffix(NAT_SUFFIX))
        elif obj.get("map", {}).get("name") in ("egress", "redirect"):
            found.update(key for key, _ in obj["map"].get("elem", []))
        elif obj.get("set", {}).get("name") in ("no_dns", "proxied"):
            found.update(obj["set"].get("elem", []))
    return {name for name in found if name.startswith(IFNAME_PREFIX)}
