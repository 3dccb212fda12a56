"""What of sandboxes' networks serve's namespace holds that no sandbox's record accounts for,
removed at serve's start once adoption is done: host ends (`sbxn*`) and the table's chains and
`egress` elements. A record is written before anything of its sandbox is made and removed only
after every undo, so such leftovers come from outside sandboxd's own undo: a state directory
removed under running sandboxes, or a namespace a killed serve shared with another state
directory (one networked serve per namespace: docs/sandboxd.md)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandboxd.errors import HostError, TeardownError
from sandboxd.network import firewall, slots

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sandboxd.network.slots import NetSlot

log = logging.getLogger("sandboxd.network.sweep")


def sweep(recorded: Iterable[NetSlot]) -> list[str]:
    """Remove the orphans: what no slot of `recorded` (every sandbox record's) accounts for;
    returns their interface names. Call before any boot (a boot makes its link and chain after
    its record, but the pool's refills must not race the listing).

    Raises:
        TeardownError: netlink or nft refused a removal (the rest are still tried first).
    """
    here = slots.own_netns_inode()
    keep = {slot.ifname for slot in recorded if slot.netns == here}
    try:
        orphans = sorted({*slots.sandbox_links(), *firewall.sandbox_entries()} - keep)
    except HostError as e:
        raise TeardownError(f"cannot list sandbox networks: {e}") from e
    failed = []
    for ifname in orphans:
        log.warning("network %s belongs to no sandbox: removing it", ifname)
        try:
            slots.remove_link(ifname)
            firewall.remove_sandbox(ifname)
        except (HostError, TeardownError) as e:
            failed.append(str(e))
    if failed:
        raise TeardownError("; ".join(failed))
    return orphans
