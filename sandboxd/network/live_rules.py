"""A running sandbox's egress rules changed while it runs: the firewall's chains and the domain
proxy's view, together. Nothing for a sandbox without a network (serve with `--no-network`).
(Its resolv.conf is in its filesystem, which its runtime writes: `Runtime.set_resolvers`.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.network import firewall

if TYPE_CHECKING:
    from sandboxd.network.egress_proxy.server import EgressProxy
    from sandboxd.network.slots import NetSlot


def set_egress(net: NetSlot | None, egress: firewall.Egress, proxy: EgressProxy | None) -> None:
    """Replace the egress rules of the sandbox on slot `net` (None: no network); `proxy`:
    serve's domain proxy, if it has one.

    Raises:
        HostError: nftables refused (the old rules stand, in the proxy's view too).
    """
    if net is None:
        return
    if proxy is None:
        firewall.set_egress(net.ifname, net.sandbox_ip, egress)
        return
    # The proxy knows the rules before the first connection is redirected to it.
    before = proxy.rules_of(net)
    proxy.set_rules(net, egress)
    try:
        firewall.set_egress(net.ifname, net.sandbox_ip, egress, proxy.port)
    except BaseException:
        proxy.restore(net, before)
        raise
