"""Many create/kill cycles through the API of a networked serve inside the fake internet's
`uplink` leave nothing of the sandboxes' networks there: no link, address, route, nftables chain
or `egress` element (tests/sandboxd/test_serve_leaks.py checks the rest of the host)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from sandboxd.network.slots import link_exists
from tests.network.fake_internet import DNS_ADDRESS
from tests.network.served import UplinkSandboxd, nft_table, uplink_network
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

CYCLES = 200  # the count
AT_ONCE = 3  # creates in flight together: the machine has two cores


@pytest.mark.timeout(2400)
def test_create_kill_cycles_leave_no_network_behind(net: FakeInternet, tmp_path: Path) -> None:
    server = UplinkSandboxd(net, tmp_path / "state", ensure_base_template(), "--dns", DNS_ADDRESS)

    def cycle(_: int) -> None:
        sandbox_id = server.create()
        assert net.uplink.call(link_exists, server.slot(sandbox_id).ifname)
        server.kill(sandbox_id)

    try:
        server.start()
        before, table = net.uplink.call(uplink_network), nft_table(net)
        with ThreadPoolExecutor(AT_ONCE) as pool:
            list(pool.map(cycle, range(CYCLES)))
        assert server.api("GET", "/sandboxes").json() == []
        assert net.uplink.call(uplink_network) == before
        assert nft_table(net) == table
    finally:
        server.clean_up()
