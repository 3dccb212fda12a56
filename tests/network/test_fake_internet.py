"""The fake internet itself, over real sockets from inside its `uplink` namespace: its servers
answer as documented, nothing else is reachable, it refuses a namespace holding what it did not
make, and it leaves nothing behind."""

from __future__ import annotations

import contextlib
import errno
import ssl
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest
from pyroute2 import IPRoute

from tests.network import package_index, probes
from tests.network.fake_internet import (
    DNS_ADDRESS,
    INDEX_ADDRESS,
    INDEX_NAME,
    INTERNET_ADDRESS,
    INTERNET_LINK,
    NAMES,
    UPLINK_ADDRESS,
    UPLINK_LINK,
    FakeInternet,
    running_fake_internet,
)
from tests.network.isolation import NotIsolated
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH}


def test_http_answers_each_name_on_its_address(fake_internet: FakeInternet) -> None:
    for name, address in NAMES.items():
        answer = fake_internet.uplink.call(probes.get, address, name)
        assert answer["host"] == name
        assert (answer["server"], answer["port"], answer["tls"]) == (address, 80, False)
        assert answer["client"] == UPLINK_ADDRESS


def test_dns_resolves_the_test_names(fake_internet: FakeInternet) -> None:
    for name, address in NAMES.items():
        assert fake_internet.uplink.call(probes.resolve, name, DNS_ADDRESS) == [address]
    assert fake_internet.uplink.call(probes.resolve, "nowhere.test", DNS_ADDRESS) == []


def test_tls_verifies_against_the_harness_ca_only(fake_internet: FakeInternet) -> None:
    uplink = fake_internet.uplink
    address = NAMES["a.example.test"]
    trusting = ssl.create_default_context(cafile=fake_internet.ca_pem)
    answer = uplink.call(probes.get, address, "a.example.test", 443, trusting)
    assert (answer["host"], answer["server"], answer["tls"]) == ("a.example.test", address, True)

    with pytest.raises(ssl.SSLCertVerificationError):
        uplink.call(probes.get, address, "a.example.test", 443, ssl.create_default_context())
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        uplink.call(probes.get, address, "not-in-the-cert.test", 443, trusting)


def test_pip_downloads_from_the_package_index(fake_internet: FakeInternet, tmp_path: Path) -> None:
    assert fake_internet.uplink.call(probes.resolve, INDEX_NAME, DNS_ADDRESS) == [INDEX_ADDRESS]
    # --isolated: neither this machine's pip configuration nor PIP_* variables take part.
    fake_internet.uplink.run(
        [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "download",
         "--no-cache-dir", "--no-deps", "--dest", str(tmp_path), package_index.PROJECT,
         "--index-url", f"http://{INDEX_ADDRESS}/simple/", "--trusted-host", INDEX_ADDRESS],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    with zipfile.ZipFile(tmp_path / package_index.WHEEL) as wheel:
        module = wheel.read(f"{package_index.MODULE}.py").decode()
    assert repr(package_index.GREETING) in module


def test_addresses_it_did_not_make_are_unreachable(fake_internet: FakeInternet) -> None:
    uplink = fake_internet.uplink
    # TEST-NET-1, a public resolver, and a private range: `internet` answers each with ICMP
    # "unreachable", as it has no link beyond its veth to `uplink`.
    for address in ["192.0.2.1", "8.8.8.8", "10.0.0.1"]:
        assert_unreachable(uplink.call(probes.connect_error, address, 80))
    assert_unreachable(uplink.call(probes.udp_error, "8.8.8.8", 53))


def assert_unreachable(error: OSError | None) -> None:
    """`internet` answered "unreachable": the error says so, whatever time it took."""
    assert error is not None, "it answered"
    assert error.errno in UNREACHABLE, error


@pytest.mark.parametrize("intrusion", ["route", "link"])
def test_refuses_a_namespace_holding_what_it_did_not_make(intrusion: str) -> None:
    net = FakeInternet()
    try:
        net.build()
        net.check_isolated()  # as the harness made it: accepted
        with net.uplink.ipr() as ipr:
            if intrusion == "route":
                ipr.route("add", dst="192.0.2.0/24", gateway=INTERNET_ADDRESS)
                expected = "route 192.0.2.0/24"
            else:
                ipr.link("add", ifname="extra0", kind="veth", peer="extra1")
                expected = "link extra0"
        with pytest.raises(NotIsolated, match=expected):
            net.check_isolated()
    finally:
        net.close()


class EndedEarly(Exception):
    """Stands for whatever ends a test early."""


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_teardown_leaves_no_namespace_link_process_or_file(outcome: str) -> None:
    with contextlib.ExitStack() as stack:
        if outcome == "failed":
            stack.enter_context(pytest.raises(EndedEarly))
        net = stack.enter_context(running_fake_internet())
        namespaces = [net.uplink, net.internet]
        # What a test runs in `uplink` (later: sandboxd serve) is stopped by teardown too.
        net.uplink.popen(["sleep", "infinity"])
        pids = net.pids()
        assert len(pids) == 2  # the servers and the sleep
        for ns in namespaces:
            assert ns.path.exists()
        # nsenter enters the namespace after the fork: wait for it to have.
        wait_until(lambda: set(pids) <= {pid for ns in namespaces for pid in ns.pids_inside()},
                   10, "the started processes to be inside the namespaces")  # fmt: skip
        assert net.uplink.call(probes.get, NAMES["other.test"], "other.test")["tls"] is False
        if outcome == "failed":
            raise EndedEarly

    for ns in namespaces:
        assert not ns.path.exists(), ns.name
        assert ns.pids_inside() == [], ns.name
        assert all(proc.returncode is not None for proc in ns.processes)
    with IPRoute() as host:  # read only: the harness never made anything here
        assert host.link_lookup(ifname=UPLINK_LINK) == []
        assert host.link_lookup(ifname=INTERNET_LINK) == []
    assert not net.workdir.exists()
