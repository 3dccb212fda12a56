"""Sandboxes' way out, as a user sees it: `sandboxd serve --network-pool` inside the fake
internet's `uplink`, sandboxes created over the API, and commands run in them by envd through
sandboxd's proxy. Default access is masqueraded out of `uplink`; allow_internet_access false,
denyOut and allowOut apply; what is always denied stays so; a kill leaves nothing in `uplink`."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import re
from typing import TYPE_CHECKING

import pytest
from pyroute2 import IPRoute

from sandboxd.errors import BootError
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.network import firewall
from sandboxd.network.slots import NetworkPool
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import BootImage, read_record
from tests.network.fake_internet import DNS_ADDRESS, NAMES, UPLINK_ADDRESS
from tests.network.in_sandbox import script
from tests.network.served import (
    POOL,
    UplinkSandboxd,
    nft_table,
    serve_s_ports,
    serving_in_uplink,
    uplink_network,
)
from tests.sandboxd.serving import kill_sandboxes
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

EXAMPLE = NAMES["example.test"]
OTHER = NAMES["other.test"]
CONNECT = script("connect")


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UplinkSandboxd]:
    """A warm pool of one, so creates take sandboxes whose network was made at boot."""
    with serving_in_uplink(
        net, tmp_path_factory.mktemp("egress") / "state", "--pool", "1"
    ) as server:
        yield server


def connect(server: UplinkSandboxd, sandbox_id: str, address: str, port: int) -> str:
    code, out, err = server.run(sandbox_id, "python3", "-c", CONNECT, address, str(port))
    assert code == 0, err
    return out.strip()


REFUSED = str(errno.EHOSTUNREACH)  # the firewall's ICMP "administratively prohibited"


def test_default_access_goes_out_masqueraded(server: UplinkSandboxd) -> None:
    sandbox_id = server.create()
    try:
        code, out, err = server.run(sandbox_id, "curl", "-sS", "http://example.test/")
        assert code == 0, err
        echo = json.loads(out)
        assert echo["server"] == EXAMPLE
        assert echo["client"] == UPLINK_ADDRESS  # the fake internet never sees the pool
        gateway = server.slot(sandbox_id).host_ip  # serve's DNS forwarder: test_sandbox_dns.py
        assert server.run(sandbox_id, "cat", "/etc/resolv.conf")[1] == f"nameserver {gateway}\n"
    finally:
        server.kill(sandbox_id)


# What IPv6 a sandbox has: its addresses and routes, what connecting to ::1 gives, and whether
# listening on :: still takes IPv4.
IPV6 = """import socket
print(open("/proc/net/if_inet6").read().split())
print([r.split()[0] for r in open("/proc/net/ipv6_route").read().splitlines()
       if not int(r.split()[8], 16) & 0x200])  # RTF_REJECT: the kernel's "unreachable"
try:
    socket.create_connection(("::1", 22), timeout=30)
except OSError as e:
    print(e.errno)
with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as s:
    socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=30).close()
    print("dual-stack")
"""


def test_a_sandbox_has_no_ipv6(server: UplinkSandboxd) -> None:
    """Turned off in its namespace when its link is made: no address (lo's ::1 is gone too), no
    route but the kernel's "unreachable" ones, so ::1 is unreachable; a server on :: still takes
    IPv4."""
    sandbox_id = server.create()
    try:
        code, out, err = server.run(sandbox_id, "python3", "-c", IPV6)
        assert code == 0, err
        assert out.splitlines() == ["[]", "[]", str(errno.EADDRNOTAVAIL), "dual-stack"]
        code, out, err = server.run(sandbox_id, "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6")
        assert (code, out) == (0, "1\n"), err
    finally:
        server.kill(sandbox_id)


def host_end(ifname: str) -> tuple[str, str]:
    """In `uplink`: the host end's `disable_ipv6` and the link-local address the kernel gives an
    interface with its MAC address (EUI-64), had it IPv6."""
    with IPRoute() as ipr:
        (link,) = ipr.link("get", index=ipr.link_lookup(ifname=ifname)[0])
    mac = bytes.fromhex(link.get_attr("IFLA_ADDRESS").replace(":", ""))
    eui64 = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:]
    link_local = ipaddress.IPv6Address(bytes.fromhex("fe80" + "00" * 6) + eui64)
    with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6") as f:
        return f.read(), str(link_local)


def test_the_host_end_has_no_ipv6(server: UplinkSandboxd, net: FakeInternet) -> None:
    """IPv6 is off on the host end of a sandbox's veth too: when the sandbox's root turns it back
    on for its own end, neighbour discovery for the host end's link-local address goes
    unanswered, and so does its ICMPv6."""
    sandbox_id = server.create()
    try:
        disabled, link_local = net.uplink.call(host_end, server.slot(sandbox_id).ifname)
        assert disabled == "1\n"
        ping = script("ping6")
        code, out, err = server.run(sandbox_id, "sudo", "python3", "-c", ping, link_local)
        assert (code, out) == (0, f"{errno.EHOSTUNREACH}\n"), err
    finally:
        server.kill(sandbox_id)


def test_always_denied_whatever_the_rules(server: UplinkSandboxd) -> None:
    """Even a sandbox allowing everything reaches neither sandboxd's API (on its gateway or
    any address of the host), nor the metadata address, nor another sandbox."""
    port = int(server.url.rsplit(":", 1)[1])
    everything = {"network": {"allowOut": ["0.0.0.0/0"]}}
    first, second = server.create(**everything), server.create(**everything)
    try:
        gateway = server.slot(first).host_ip
        assert connect(server, first, gateway, port) == REFUSED
        assert connect(server, first, UPLINK_ADDRESS, port) == REFUSED
        assert connect(server, first, "169.254.169.254", 80) == REFUSED
        assert connect(server, first, server.slot(second).sandbox_ip, 49983) == REFUSED
        assert connect(server, first, EXAMPLE, 80) == "connected"
    finally:
        server.kill(first)
        server.kill(second)


def test_no_internet_access(server: UplinkSandboxd) -> None:
    sandbox_id = server.create(allow_internet_access=False)
    try:
        assert connect(server, sandbox_id, EXAMPLE, 80) == REFUSED
        assert connect(server, sandbox_id, DNS_ADDRESS, 53) == REFUSED
    finally:
        server.kill(sandbox_id)


def test_allow_beats_deny(server: UplinkSandboxd) -> None:
    network = {"allowOut": [EXAMPLE], "denyOut": ["198.51.100.0/24"]}
    sandbox_id = server.create(network=network)
    try:
        assert connect(server, sandbox_id, EXAMPLE, 80) == "connected"
        assert connect(server, sandbox_id, OTHER, 80) == REFUSED
    finally:
        server.kill(sandbox_id)


def test_the_rules_apply_again_after_a_pause_to_disk(server: UplinkSandboxd) -> None:
    """A pause to disk gives up the sandbox's network slot; its resume boots it with a new one
    and the same rules, reached through the proxy as before."""
    sandbox_id = server.create(network={"allowOut": [EXAMPLE], "denyOut": ["0.0.0.0/0"]})
    try:
        pause = server.api("POST", f"/sandboxes/{sandbox_id}/pause", json={"memory": False})
        assert pause.status_code == 204
        resumed = server.api("POST", f"/sandboxes/{sandbox_id}/resume", json={"timeout": 60})
        assert resumed.status_code == 201, resumed.text
        assert connect(server, sandbox_id, EXAMPLE, 80) == "connected"
        assert connect(server, sandbox_id, OTHER, 80) == REFUSED
    finally:
        server.kill(sandbox_id)


def test_an_update_replaces_the_rules_for_new_connections(server: UplinkSandboxd) -> None:
    """PUT /sandboxes/{id}/network, as E2B: the egress rules replaced at once, a field left
    out cleared, the create's other network settings kept; GET shows what applies."""
    sandbox_id = server.create(network={"maskRequestHost": "app.test", "denyOut": [OTHER]})
    path = f"/sandboxes/{sandbox_id}/network"
    try:
        assert connect(server, sandbox_id, OTHER, 80) == REFUSED
        assert server.api("PUT", path, json={"allow_internet_access": False}).status_code == 204
        assert connect(server, sandbox_id, EXAMPLE, 80) == REFUSED
        info = server.api("GET", f"/sandboxes/{sandbox_id}").json()
        assert (info["allowInternetAccess"], info["network"]) == (False, {"maskRequestHost":
                                                                          "app.test"})  # fmt: skip
        update = {"allowOut": [EXAMPLE], "denyOut": ["0.0.0.0/0"]}
        assert server.api("PUT", path, json=update).status_code == 204
        assert connect(server, sandbox_id, EXAMPLE, 80) == "connected"
        assert connect(server, sandbox_id, OTHER, 80) == REFUSED
        assert server.api("PUT", path, json={}).status_code == 204
        assert connect(server, sandbox_id, OTHER, 80) == "connected"
        assert server.api("PUT", path, json={"denyOut": ["nowhere"]}).status_code == 400
        assert server.api("PUT", "/sandboxes/nosuch/network", json={}).status_code == 404
    finally:
        server.kill(sandbox_id)


def leftovers(server: UplinkSandboxd, net: FakeInternet) -> list[object]:
    """What of the sandboxes' networks in `uplink` no live sandbox's record accounts for (the
    warm pool's refill may be booting, and may take a killed sandbox's slot again)."""
    slots = [server.slot(box.name) for box in server.box_dir("x").parent.iterdir()]
    ifnames = {slot.ifname for slot in slots}
    seen = net.uplink.call(uplink_network)
    table = nft_table(net)
    return [
        *(link for link in seen["links"] if link.startswith("sbxn") and link not in ifnames),
        *(a for a in seen["addresses"] if a[0].startswith("sbxn") and a[0] not in ifnames),
        *(r for r in seen["routes"] if str(r[0]).startswith("sbxn") and r[0] not in ifnames),
        *(c for c in re.findall(r"chain (sbxn\d+)", table) if c not in ifnames),
        *(e for e in re.findall(r'"(sbxn\d+)" : jump', table) if e not in ifnames),
    ]


def test_kills_leave_nothing_in_uplink(server: UplinkSandboxd, net: FakeInternet) -> None:
    for _ in range(3):
        sandbox_id = server.create()
        slot = server.slot(sandbox_id)
        assert slot.ifname in net.uplink.call(uplink_network)["links"]
        assert f"chain {slot.ifname} " in nft_table(net)
        server.kill(sandbox_id)
        assert server.traces(sandbox_id) == []
        assert leftovers(server, net) == []


def test_a_restarted_serve_adopts_sandboxes_with_their_rules(
    server: UplinkSandboxd, net: FakeInternet
) -> None:
    """serve restarted (sandboxes keep running): the table is updated, not replaced, so each
    adopted sandbox keeps its way out and its rules, across a pause too; killing it afterwards
    leaves nothing."""
    open_id = server.create(timeout=600)
    closed_id = server.create(allow_internet_access=False, timeout=600)
    try:
        server.stop()
        server.start()
        assert connect(server, open_id, EXAMPLE, 80) == "connected"
        # The new serve's DNS forwarder has ports of its own: the redirect follows them; the
        # sandbox denied everything still gets no DNS (its `no_dns` element was kept).
        code, out, err = server.run(open_id, "getent", "hosts", "example.test")
        assert (code, out.split()[:1]) == (0, [EXAMPLE]), err
        assert server.run(closed_id, "getent", "hosts", "example.test")[0] == 2  # not found
        # ...nor at the new forwarder's own ports, nor the new domain proxy's.
        dns, proxy = serve_s_ports(net)
        gateway = server.slot(closed_id).host_ip
        for proto, port in dns.items():
            code, out, err = server.run(closed_id, "python3", "-c", script("dns_query"), gateway,
                                        str(port), proto, "nosuch.test")  # fmt: skip
            assert (code, out) == (0, REFUSED + "\n"), err
        assert connect(server, closed_id, gateway, proxy) == REFUSED
        # A pause freezes the processes, not the network: resumed, it goes out as before.
        assert server.api("POST", f"/sandboxes/{open_id}/pause").status_code == 204
        resumed = server.api("POST", f"/sandboxes/{open_id}/connect", json={"timeout": 60})
        assert resumed.status_code == 201
        assert connect(server, open_id, EXAMPLE, 80) == "connected"
        assert connect(server, closed_id, EXAMPLE, 80) == REFUSED
    finally:
        server.kill(open_id)
        server.kill(closed_id)
    assert leftovers(server, net) == []


ORPHAN_LINK, ORPHAN_CHAIN = "sbxn4000", "sbxn4001"


def make_orphans() -> None:
    """In `uplink`: a host end and a chain with its `egress` element no record accounts for."""
    with IPRoute() as ipr:
        ipr.link("add", ifname=ORPHAN_LINK, kind="veth", peer={"ifname": "orphan-peer"})
    firewall.add_sandbox(ORPHAN_CHAIN, "10.11.250.2")


def test_a_restart_sweeps_what_a_killed_serve_left(
    server: UplinkSandboxd, net: FakeInternet
) -> None:
    """serve killed (SIGKILL: nothing of its own clean-up runs), and sandbox networks in its
    namespace that no record accounts for (as a state directory removed under running sandboxes
    leaves them): the next start removes them once it has adopted the sandboxes, whose own it
    keeps."""
    sandbox_id = server.create()
    try:
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        server.proc = None
        net.uplink.call(make_orphans)
        assert ORPHAN_LINK in net.uplink.call(uplink_network)["links"]
        assert f'"{ORPHAN_CHAIN}" : jump' in nft_table(net)
        server.start()
        assert leftovers(server, net) == []
        assert connect(server, sandbox_id, EXAMPLE, 80) == "connected"
        assert "orphan-peer" not in net.uplink.call(uplink_network)["links"]
    finally:
        server.kill(sandbox_id)


def test_a_failed_boot_leaves_nothing(
    server: UplinkSandboxd, net: FakeInternet, tmp_path: Path
) -> None:
    """A boot that fails after its network was made (no time at all to answer /health) undoes
    it: an NspawnRuntime of its own beside serve's, in `uplink` (where serve installed the table)."""
    state, parent = tmp_path / "state", f"{server.cgroup_parent}-failing"
    pool = NetworkPool(ipaddress.IPv4Network(POOL), DNS_ADDRESS)
    runtime = NspawnRuntime(
        state / "sandboxes",
        parent,
        boot_timeout_s=0,
        network=pool,
        probe=envd_ready,
        guest_unit=ENVD_UNIT,
    )

    async def boot() -> None:
        with pytest.raises(BootError, match="no answer from"):
            await runtime.boot("failing", BootImage((ensure_base_template(),)))

    try:
        net.uplink.call(asyncio.run, boot())
        assert list(runtime.sandboxes_dir.iterdir()) == []
        assert leftovers(server, net) == []
    finally:
        net.uplink.call(kill_sandboxes, state, parent)


def forwarding() -> str:
    with open("/proc/sys/net/ipv4/ip_forward") as f:  # the calling thread's namespace's
        return f.read()


def test_no_network_touches_nothing_of_serve_s_namespace(
    fake_internet: FakeInternet, tmp_path: Path
) -> None:
    """`--no-network` in a fresh fake internet: the sandbox has only its loopback, and serve's
    namespace keeps its links, routes, forwarding off, and no table."""
    net, before = fake_internet, fake_internet.uplink.call(uplink_network)
    server = UplinkSandboxd(net, tmp_path / "state", ensure_base_template(), "--no-network")
    try:
        server.start()
        sandbox_id = server.create()
        record = read_record(server.box_dir(sandbox_id))
        assert record is not None
        assert record.net is None
        code, out, err = server.run(sandbox_id, "cat", "/proc/net/dev")
        assert code == 0, err
        assert [line.split(":")[0].strip() for line in out.splitlines()[2:]] == ["lo"]
        assert net.uplink.call(uplink_network) == before
        assert net.uplink.call(forwarding) == "0\n"
        assert net.uplink.run(["nft", "list", "tables"], capture_output=True).stdout == b""
        server.kill(sandbox_id)
    finally:
        server.clean_up()
