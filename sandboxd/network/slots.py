"""Each sandbox's way out, when serve has a network pool: a slot (a /30 of the pool) and a veth
pair, the host end in sandboxd's own network namespace and the other end, `eth0`, in the
container's, with the sandbox's address and a default route through the host end.

The slot is the sandbox's uid range's index (sandboxd.host.uid_ranges): ranges are unique among
the host's live sandboxes and are released only after every undo ran, so slots are too, with no
claims of their own. All netlink work goes through pyroute2, each part on a thread of its own
that enters the namespace it works in (setns moves one thread; it ends with the work).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sandboxd.errors import HostError, TeardownError
from sandboxd.host import libc
from sandboxd.host.uid_ranges import FIRST_BASE, RANGE_SIZE

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyroute2 import IPRoute

log = logging.getLogger("sandboxd.network.slots")

T = TypeVar("T")

# Private (RFC 1918) and rarely a host's own LAN: 16384 slots. Its /8 is always denied to
# sandboxes anyway (sandboxd.network.firewall).
DEFAULT_NETWORK_POOL = ipaddress.IPv4Network("10.11.0.0/16")
SLOT_PREFIX = 30  # a point-to-point link: network, host end, sandbox end, broadcast
IFNAME_PREFIX = "sbxn"  # host ends are sbxnSLOT (IFNAMSIZ: at most 15 characters)
SANDBOX_IFNAME = "eth0"
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
# `all` turns IPv6 off on the namespace's existing links (lo's ::1 goes), `default` on links
# made later in it.
DISABLE_IPV6 = ("/proc/sys/net/ipv6/conf/all/disable_ipv6",
                "/proc/sys/net/ipv6/conf/default/disable_ipv6")  # fmt: skip
# The host end's, set before it is up: it never gets an IPv6 address, so a sandbox whose root turns
# IPv6 back on has nothing to talk to over it (not even neighbour discovery).
HOST_END_IPV6 = "/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"


def own_netns_inode() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


@dataclass(frozen=True)
class NetSlot:
    """A sandbox's network, as its record holds it. `netns` is the inode of the network
    namespace sandboxd served in when it made the slot: the host end, its addresses and its
    nftables elements exist there only, and only a sandboxd in that namespace undoes them."""

    index: int
    host_ip: str
    sandbox_ip: str
    ifname: str
    netns: int


@dataclass(frozen=True)
class NetworkPool:
    """`sandboxd serve --network-pool CIDR [--dns ADDRESS]`. `dns`: the upstream resolver of
    serve's DNS forwarder (None: the nameservers of serve's own /etc/resolv.conf)."""

    cidr: ipaddress.IPv4Network
    dns: str | None = None

    @property
    def slots(self) -> int:
        return int(self.cidr.num_addresses) >> (32 - SLOT_PREFIX)

    def slot(self, uid_base: int) -> NetSlot:
        """The slot of the sandbox holding uid range `uid_base`.

        Raises:
            HostError: the pool has no slot that far (it is too small for the host's sandboxes).
        """
        index = (uid_base - FIRST_BASE) // RANGE_SIZE
        if not 0 <= index < self.slots:
            raise HostError(f"network pool {self.cidr} has no slot {index}: use a larger one")
        network = int(self.cidr.network_address) + (index << (32 - SLOT_PREFIX))
        return NetSlot(
            index,
            str(ipaddress.IPv4Address(network + 1)),
            str(ipaddress.IPv4Address(network + 2)),
            f"{IFNAME_PREFIX}{index}",
            own_netns_inode(),
        )


def parse_pool(text: str) -> ipaddress.IPv4Network:
    """Raises ValueError unless `text` is an IPv4 CIDR of at least one slot."""
    cidr = ipaddress.IPv4Network(text, strict=True)
    if cidr.prefixlen > SLOT_PREFIX:
        raise ValueError(f"{text}: a pool needs a prefix of /{SLOT_PREFIX} or shorter")
    return cidr


def enable_forwarding() -> None:
    """IPv4 forwarding in sandboxd's namespace (the file is the opening thread's namespace's)."""
    with open(IP_FORWARD, "w") as f:
        f.write("1")


def in_netns(fd: int, fn: Callable[[], T]) -> T:
    """`fn()` on a thread of its own inside the network namespace `fd` refers to."""
    outcome: dict[str, Any] = {}

    def inside() -> None:
        try:
            libc.setns(fd, libc.CLONE_NEWNET)
            outcome["result"] = fn()
        except BaseException as e:  # noqa: BLE001  # re-raised on the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=inside, name="sandboxd-netns")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["result"]
    return result


def _netlink() -> IPRoute:
    """rtnetlink in the calling thread's namespace. pyroute2 is imported here, not with the
    module: it adds a tenth of a second to every start of sandboxd, most of which serve no
    network."""
    from pyroute2 import IPRoute

    return IPRoute()


def make_link(slot: NetSlot, leader_pid: int) -> None:
    """The veth pair: its host end addressed, without IPv6 and up here, `eth0` in the network
    namespace of process `leader_pid` (the container's PID 1), addressed, up, and the default
    route; `lo` up; IPv6 off in that namespace.

    Raises:
        OSError: the container is gone.
        HostError: netlink refused.
    """
    from pyroute2.netlink.exceptions import NetlinkError

    container = os.open(f"/proc/{leader_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with _netlink() as ipr:
            ipr.link("add", ifname=slot.ifname, kind="veth",
                     peer={"ifname": SANDBOX_IFNAME, "net_ns_fd": container})  # fmt: skip
            (index,) = ipr.link_lookup(ifname=slot.ifname)
            _disable_ipv6(HOST_END_IPV6.format(ifname=slot.ifname))  # this thread's namespace's
            ipr.addr("add", index=index, address=slot.host_ip, prefixlen=SLOT_PREFIX)
            ipr.link("set", index=index, state="up")
        in_netns(container, lambda: _configure_inside(slot))
    except NetlinkError as e:  # not an OSError
        raise HostError(f"sandbox network {slot.ifname}: {e}") from e
    finally:
        os.close(container)


def _disable_ipv6(path: str) -> None:
    """`path`, a `disable_ipv6` file, set (nothing without IPv6 in the kernel)."""
    with contextlib.suppress(FileNotFoundError), open(path, "w") as f:
        f.write("1")


def _configure_inside(slot: NetSlot) -> None:
    """IPv6 off (the firewall forwards IPv4 only: a sandbox with IPv6 addresses would try them
    first and wait for nothing), then the links, address and route."""
    for path in DISABLE_IPV6:  # the files are the opening thread's namespace's
        _disable_ipv6(path)
    with _netlink() as ipr:
        (lo,) = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=lo, state="up")
        (index,) = ipr.link_lookup(ifname=SANDBOX_IFNAME)
        ipr.addr("add", index=index, address=slot.sandbox_ip, prefixlen=SLOT_PREFIX)
        ipr.link("set", index=index, state="up")
        ipr.route("add", dst="0.0.0.0/0", gateway=slot.host_ip)


def remove_link(ifname: str) -> None:
    """Delete the host end `ifname` (its peer, address and routes go with it); nothing if it
    is gone.

    Raises:
        TeardownError: netlink refused.
    """
    from pyroute2.netlink.exceptions import NetlinkError

    with _netlink() as ipr:
        try:
            ipr.link("del", ifname=ifname)
        except NetlinkError as e:
            if e.code != errno.ENODEV:
                raise TeardownError(f"cannot delete {ifname}: {e}") from e


def link_exists(ifname: str) -> bool:
    with _netlink() as ipr:
        return bool(ipr.link_lookup(ifname=ifname))


def sandbox_links() -> list[str]:
    """The names of the sandboxes' host ends in this thread's namespace."""
    with _netlink() as ipr:
        names = (link.get_attr("IFLA_IFNAME") for link in ipr.get_links())
        return sorted(name for name in names if name.startswith(IFNAME_PREFIX))
