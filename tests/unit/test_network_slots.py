"""Pure parts of sandbox networking: a slot from a uid range, the pool's form, the egress rules a
create's options give and what an update makes of them, a record with a slot read back, and the
DNS forwarder's default upstreams. The network itself is tested in tests/network/."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from sandboxd.errors import HostError
from sandboxd.host.cgroups import Limits
from sandboxd.host.uid_ranges import FIRST_BASE, RANGE_SIZE
from sandboxd.lifecycle.egress import egress_of, with_update
from sandboxd.network.dns_forwarder import host_nameservers
from sandboxd.network.firewall import Egress, Tunnel
from sandboxd.network.slots import NetworkPool, parse_pool
from sandboxd.runtime.spec import SandboxSpec

POOL = NetworkPool(ipaddress.IPv4Network("10.11.0.0/16"), "198.51.100.53")


def test_a_slot_is_the_uid_range_s_index() -> None:
    first = POOL.slot(FIRST_BASE)
    assert (first.index, first.host_ip, first.sandbox_ip, first.ifname) == (
        0, "10.11.0.1", "10.11.0.2", "sbxn0")  # fmt: skip
    last = POOL.slot(FIRST_BASE + (POOL.slots - 1) * RANGE_SIZE)
    assert (last.host_ip, last.sandbox_ip, last.ifname) == ("10.11.255.253", "10.11.255.254",
                                                            "sbxn16383")  # fmt: skip
    assert len(last.ifname) <= 15  # IFNAMSIZ
    with pytest.raises(HostError, match="no slot 16384"):
        POOL.slot(FIRST_BASE + POOL.slots * RANGE_SIZE)


@pytest.mark.parametrize("text", ["10.11.0.0/31", "10.11.0.1/16", "fd00::/64", "pool"])
def test_pools_that_are_not_one(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # each its own message
        parse_pool(text)


@pytest.mark.parametrize(
    ("options", "egress"),
    [
        ({}, None),
        ({"allow_internet_access": True}, None),
        ({"allow_internet_access": False}, Egress((), ("0.0.0.0/0",))),
        ({"network": {"allowOut": ["1.2.3.4", "Example.COM.", "*.a.test", "fd00::1"],
                      "denyOut": ["0.0.0.0/0", "::/0"]}},
         Egress(("1.2.3.4/32",), ("0.0.0.0/0",), ("example.com", "*.a.test"))),
        ({"network": {"allowOut": ["a.test"], "denyOut": ["0.0.0.0/0"],
                      "dnsServers": ["9.9.9.9"]}},
         Egress((), ("0.0.0.0/0",), ("a.test",), ("9.9.9.9/32",))),
        ({"network": {"allowOut": ["a.test"], "denyOut": ["0.0.0.0/0"], "dnsServers": []}},
         Egress((), ("0.0.0.0/0",), ("a.test",), ())),
        ({"network": {"egressProxy": {"address": "socks.test:1080", "username": "u"}}},
         Egress(tunnel=Tunnel("socks.test", 1080, "u"))),
        ({"network": {"allowOut": ["8.8.8.8/32"]}, "allow_internet_access": False},
         Egress(("8.8.8.8/32",), ("0.0.0.0/0",))),
    ],
)  # fmt: skip
def test_egress_from_a_create(options: dict[str, object], egress: Egress | None) -> None:
    assert egress_of(options) == egress


def test_a_record_keeps_its_slot_and_old_records_are_read() -> None:
    spec = SandboxSpec("a1", (Path("/t"),), Limits(), FIRST_BASE, 0, POOL.slot(FIRST_BASE))
    assert SandboxSpec.from_json(spec.to_json()) == spec
    record = json.loads(spec.to_json())
    record["net"]["dns"] = "198.51.100.53"  # a record from before the DNS forwarder
    assert SandboxSpec.from_json(json.dumps(record)) == spec
    del record["net"]  # a record from before networking
    assert SandboxSpec.from_json(json.dumps(record)).net is None


def test_an_update_replaces_the_egress_fields_and_keeps_the_create_only_ones() -> None:
    created = {"allow_internet_access": False, "mcp": {"x": 1},
               "network": {"allowPublicTraffic": False, "maskRequestHost": "h",
                           "allowOut": ["1.2.3.4"], "denyOut": ["0.0.0.0/0"]}}  # fmt: skip
    assert with_update(created, {"denyOut": ["8.8.8.8"]}) == {
        "mcp": {"x": 1},
        "network": {"allowPublicTraffic": False, "maskRequestHost": "h", "denyOut": ["8.8.8.8"]},
    }
    assert with_update({"network": {"allowOut": ["1.2.3.4"]}}, {}) == {}
    assert with_update({}, {"allow_internet_access": True}) == {"allow_internet_access": True}


def test_the_forwarder_s_default_upstreams_are_serve_s_own(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("# systemd-resolved\nnameserver 127.0.0.53\noptions edns0\n"
                    "nameserver fe80::1%eth0\nnameserver bogus\nsearch example.test\n")  # fmt: skip
    assert host_nameservers(conf) == ["127.0.0.53", "fe80::1%eth0"]
    conf.write_text("search example.test\n")
    assert host_nameservers(conf) == ["127.0.0.1"]  # glibc's default
    assert host_nameservers(tmp_path / "none") == ["127.0.0.1"]
