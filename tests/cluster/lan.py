"""The networked rig's machines (tests/cluster/netrig.py): a network namespace per node agent,
joined to the fake internet's `uplink` (tests/network/fake_internet.py) by a LAN of their own.

    internet ── uplink0 │ uplink │ bridge rig0 10.210.0.1 ── lan-a ═ lan0 10.210.0.11 │ node a
                                                          └── lan-b ═ lan0 10.210.0.12 │ node b

`uplink` routes between the LAN and `internet` (which routes the LAN back to it), so a node's
masquerade sends its sandboxes' traffic to the fake internet from the node's own address, and
nothing else exists to reach. The LAN is private (10/8), which every sandbox is always denied:
no sandbox reaches another node, `uplink` or the gateways there. Each namespace is checked to
hold only what this module made before any agent starts (`check_isolated`), and `remove`
deletes the node namespaces (and with them their veths and whatever an agent left in them).
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.network.fake_internet import (
    INTERNET_ADDRESS,
    INTERNET_LINK,
    UPLINK_ADDRESS,
    UPLINK_LINK,
    set_sysctls,
)
from tests.network.isolation import Sealed, check_sealed
from tests.network.namespaces import NetworkNamespace

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.network.fake_internet import FakeInternet

LAN = ipaddress.IPv4Network("10.210.0.0/24")
LAN_GATEWAY = "10.210.0.1"  # `uplink`'s address on the bridge: the nodes' default route
BRIDGE = "rig0"
NODE_LINK = "lan0"  # a node's end of its veth, inside its namespace
LETTERS = "abc"


@dataclass(frozen=True)
class LanNode:
    """One machine of the LAN: its namespace, its address there and its sandboxes' pool."""

    letter: str
    ns: NetworkNamespace
    address: str
    pool: str

    @property
    def uplink_link(self) -> str:
        return f"lan-{self.letter}"


class RigLan:
    """`count` node namespaces joined to `net.uplink` (built, not yet checked)."""

    def __init__(self, net: FakeInternet, count: int) -> None:
        if not 1 <= count <= len(LETTERS):
            raise ValueError(f"the rig has 1 to {len(LETTERS)} nodes, not {count}")
        self.net = net
        self.count = count
        self.nodes: list[LanNode] = []
        self.checked = False  # True once every namespace held only what was made

    def build(self) -> None:
        """The bridge and routes in `uplink` and `internet`, then each node's namespace."""
        uplink = self.net.uplink
        uplink.call(set_sysctls, {"net/ipv4/ip_forward": "1"})
        with uplink.ipr() as ipr:
            ipr.link("add", ifname=BRIDGE, kind="bridge")
            bridge = ipr.link_lookup(ifname=BRIDGE)[0]
            ipr.addr("add", index=bridge, address=LAN_GATEWAY, prefixlen=LAN.prefixlen)
            ipr.link("set", index=bridge, state="up")
        with self.net.internet.ipr() as ipr:
            ipr.route("add", dst=str(LAN), gateway=UPLINK_ADDRESS)
        for i, letter in enumerate(LETTERS[: self.count]):
            ns = NetworkNamespace(f"{self.net.prefix}-node-{letter}")
            node = LanNode(letter, ns, str(LAN.network_address + 11 + i), f"10.{11 + i}.0.0/16")
            self.nodes.append(node)
            self._attach(node)

    def _attach(self, node: LanNode) -> None:
        with node.ns.ipr() as ipr:
            ipr.link("add", ifname=NODE_LINK, kind="veth",
                     peer={"ifname": node.uplink_link, "net_ns_fd": self.net.uplink.name})  # fmt: skip
            veth = ipr.link_lookup(ifname=NODE_LINK)[0]
            ipr.addr("add", index=veth, address=node.address, prefixlen=LAN.prefixlen)
            ipr.link("set", index=veth, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        with self.net.uplink.ipr() as ipr:
            bridge = ipr.link_lookup(ifname=BRIDGE)[0]
            port = ipr.link_lookup(ifname=node.uplink_link)[0]
            ipr.link("set", index=port, master=bridge, state="up")
        with node.ns.ipr() as ipr:  # the veth has a carrier now that both ends are up
            ipr.route("add", dst="0.0.0.0/0", gateway=LAN_GATEWAY)

    def check_isolated(self) -> None:
        """Refuse to go on if `uplink`, `internet` or a node's namespace holds a link or route
        that was not made here or by the fake internet.

        Raises:
            NotIsolated: naming what is there that should not be.
        """
        uplink_links = {"lo", UPLINK_LINK, BRIDGE, *(n.uplink_link for n in self.nodes)}
        check_sealed(self.net.uplink, Sealed(
            links=frozenset(uplink_links),
            routes=frozenset({("default", INTERNET_ADDRESS, UPLINK_LINK)})))  # fmt: skip
        check_sealed(self.net.internet, Sealed(
            links=frozenset({"lo", INTERNET_LINK}),
            routes=frozenset({(str(LAN), UPLINK_ADDRESS, INTERNET_LINK)})))  # fmt: skip
        for node in self.nodes:
            check_sealed(node.ns, Sealed(
                links=frozenset({"lo", NODE_LINK}),
                routes=frozenset({("default", LAN_GATEWAY, NODE_LINK)})))  # fmt: skip
        self.checked = True

    def remove(self) -> None:
        """Delete every node namespace (its veth, and the peer in `uplink`, go with it)."""
        with contextlib.ExitStack() as undo:  # every one removed, whichever fails
            for node in self.nodes:
                undo.callback(node.ns.remove)


@contextlib.contextmanager
def rig_lan(net: FakeInternet, count: int) -> Iterator[RigLan]:
    """A built and checked LAN of `count` nodes in `net`, removed however the block ends.

    Raises:
        NotIsolated: a namespace held something that was not made for the rig.
    """
    lan = RigLan(net, count)
    try:
        lan.build()
        lan.check_isolated()
        yield lan
    finally:
        lan.remove()
