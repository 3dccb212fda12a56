"""A running sandbox's network changed while it runs: its egress rules (the firewall's chains
and the domain proxy's view, together) and its resolv.conf. Nothing for a sandbox without a
network (serve with `--no-network`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd.errors import HostError
from sandboxd.network import firewall, resolv_conf
from sandboxd.runtime.nspawn.steps import SandboxDirs

if TYPE_CHECKING:
    from sandboxd.network.egress_proxy.server import EgressProxy
    from sandboxd.runtime.nspawn.runtime import Box


def set_egress(box: Box, egress: firewall.Egress, proxy: EgressProxy | None) -> None:
    """Replace the sandbox's egress rules; `proxy`: serve's domain proxy, if it has one.

    Raises:
        HostError: nftables refused (the old rules stand, in the proxy's view too).
    """
    net = box.spec.net
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


def set_resolvers(box: Box, nameservers: list[str] | None) -> None:
    """Name `nameservers` in the sandbox's /etc/resolv.conf (None: its gateway, serve's DNS
    forwarder).

    Raises:
        HostError: the file could not be written (the sandbox's /etc is not a directory).
    """
    if box.spec.net is None:
        return
    try:
        resolv_conf.rewrite(SandboxDirs(box.dir).root, nameservers or [box.spec.net.host_ip],
                            box.uid_base)  # fmt: skip
    except OSError as e:
        raise HostError(f"sandbox {box.id}: cannot write its resolv.conf: {e}") from e
