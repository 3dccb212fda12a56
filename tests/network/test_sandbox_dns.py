"""Sandboxes' DNS, as a user sees it: serve inside the fake internet's `uplink` with `--dns` the
fake internet's resolver; a sandbox's resolv.conf names its gateway, where serve's forwarder
relays UDP and TCP queries, or the create's `dnsServers` (a warm sandbox's file rewritten); the
forwarder's ports answer nothing outside the pool."""

from __future__ import annotations

import concurrent.futures
import errno
import ipaddress
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from sandboxd.network.slots import DEFAULT_NETWORK_POOL
from tests.network.fake_internet import DNS_ADDRESS, NAMES, UPLINK_ADDRESS
from tests.network.in_sandbox import script
from tests.network.probes import connect_error, udp_error
from tests.network.served import UplinkSandboxd, serve_s_ports
from tests.sandboxd.template_cache import ensure_base_template
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.network.fake_internet import FakeInternet

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
]

EXAMPLE = NAMES["example.test"]
# Prints the IPv4 addresses getaddrinfo gives for NAME, or the error's name.
GETADDRINFO = """import socket, sys
try:
    print(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 80, socket.AF_INET)}))
except socket.gaierror as e:
    print(e.args[0])
"""
# One A query over TCP to SERVER:53 for NAME, sent raw (the template has no DNS library):
# prints the addresses of the answer's A records.
TCP_QUERY = """import socket, struct, sys
name = b"".join(bytes([len(p)]) + p for p in sys.argv[2].encode().split(b".")) + b"\\0"
query = struct.pack(">HHHHHH", 0x5a5a, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
with socket.create_connection((sys.argv[1], 53), timeout=30) as s:
    s.sendall(struct.pack(">H", len(query)) + query)
    data = b""
    while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
        data += s.recv(65535)
answer = data[2:]
assert answer[:2] == query[:2], answer
at, found = len(query), []
for _ in range(struct.unpack(">H", answer[6:8])[0]):
    while answer[at] and answer[at] < 0xC0:
        at += answer[at] + 1
    at += 2 if answer[at] else 1
    kind, _, _, size = struct.unpack(">HHIH", answer[at : at + 10])
    if kind == 1:
        found.append(socket.inet_ntoa(answer[at + 10 : at + 14]))
    at += 10 + size
print(found)
"""


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UplinkSandboxd]:
    """serve's default network (no --network-pool), and a warm pool of one: creates take
    sandboxes booted before their options were known."""
    state = tmp_path_factory.mktemp("dns") / "state"
    server = UplinkSandboxd(net, state, ensure_base_template(), "--dns", DNS_ADDRESS, "--pool", "1")
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


def out(server: UplinkSandboxd, sandbox_id: str, *argv: str) -> str:
    code, stdout, stderr = server.run(sandbox_id, *argv)
    assert code == 0, (stdout, stderr)
    return stdout


def warm_sandbox(server: UplinkSandboxd) -> str:
    """The id of the sandbox waiting in the pool, once it is there (serve logs its boot just
    before the pool takes it in, with nothing between)."""
    found: list[str] = []

    def waiting() -> bool:
        listed = {s["sandboxID"] for s in server.api("GET", "/sandboxes").json()}
        log = server.log.read_text()
        found[:] = [box.name for box in server.box_dir("x").parent.iterdir()
                    if box.name not in listed and f"sandbox {box.name} up in" in log]  # fmt: skip
        return len(found) == 1

    wait_until(waiting, 120, "a warm sandbox")
    return found[0]


def test_the_gateway_resolves_through_the_forwarder(server: UplinkSandboxd) -> None:
    sandbox_id = server.create()
    try:
        gateway = server.slot(sandbox_id).host_ip
        assert ipaddress.IPv4Address(gateway) in DEFAULT_NETWORK_POOL
        assert out(server, sandbox_id, "cat", "/etc/resolv.conf") == f"nameserver {gateway}\n"
        assert out(server, sandbox_id, "getent", "hosts", "example.test").split() == [
            EXAMPLE, "example.test"]  # fmt: skip
        assert out(server, sandbox_id, "python3", "-c", GETADDRINFO, "a.example.test") == (
            f"['{NAMES['a.example.test']}']\n"
        )
        assert out(server, sandbox_id, "python3", "-c", TCP_QUERY, gateway, "other.test") == (
            f"['{NAMES['other.test']}']\n"
        )
        code, _, _ = server.run(sandbox_id, "getent", "hosts", "nosuch.test")
        assert code == 2  # getent's "not found": the upstream's NXDOMAIN came back
    finally:
        server.kill(sandbox_id)


def test_dns_servers_are_the_sandbox_s_resolvers(server: UplinkSandboxd) -> None:
    """`network.dnsServers` replaces the gateway in resolv.conf, of a warm sandbox too; an update
    changes it, and one leaving it out names the gateway again."""
    warm = warm_sandbox(server)
    sandbox_id = server.create(network={"dnsServers": [DNS_ADDRESS]})
    try:
        assert sandbox_id == warm
        assert out(server, sandbox_id, "cat", "/etc/resolv.conf") == f"nameserver {DNS_ADDRESS}\n"
        assert out(server, sandbox_id, "stat", "-c", "%U %a", "/etc/resolv.conf") == "root 644\n"
        assert out(server, sandbox_id, "getent", "hosts", "example.test").split()[0] == EXAMPLE
        path = f"/sandboxes/{sandbox_id}/network"
        assert server.api("PUT", path, json={}).status_code == 204
        gateway = server.slot(sandbox_id).host_ip
        assert out(server, sandbox_id, "cat", "/etc/resolv.conf") == f"nameserver {gateway}\n"
        update = {"dnsServers": [DNS_ADDRESS, "192.0.2.1"]}
        assert server.api("PUT", path, json=update).status_code == 204
        assert out(server, sandbox_id, "cat", "/etc/resolv.conf") == (
            f"nameserver {DNS_ADDRESS}\nnameserver 192.0.2.1\n"
        )
    finally:
        server.kill(sandbox_id)
    refused = server.api(
        "POST", "/sandboxes", json={"templateID": "base", "network": {"dnsServers": ["nowhere"]}}
    )
    assert refused.status_code == 400
    assert "dnsServers" in refused.json()["message"]


def test_a_sandbox_that_reaches_nothing_resolves_nothing(server: UplinkSandboxd) -> None:
    """Denied everything (allow_internet_access false, or denyOut 0.0.0.0/0 with nothing
    allowed), a sandbox's queries to its gateway are refused like any other traffic: names
    would otherwise carry its data out. Anything allowed (an address or a domain) gives DNS
    back, and updates move the sandbox in and out."""
    sandbox_id = server.create(allow_internet_access=False)
    path = f"/sandboxes/{sandbox_id}/network"
    try:
        gateway = server.slot(sandbox_id).host_ip
        resolved = f"['{EXAMPLE}']\n"
        assert out(server, sandbox_id, "python3", "-c", GETADDRINFO, "example.test") != resolved
        connected = out(server, sandbox_id, "python3", "-c", script("connect"), gateway, "53")
        assert connected == f"{errno.EHOSTUNREACH}\n"
        for update in ({"denyOut": ["0.0.0.0/0"], "allowOut": [EXAMPLE]},
                       {"denyOut": ["0.0.0.0/0"], "allowOut": ["example.test"]}, {}):  # fmt: skip
            assert server.api("PUT", path, json=update).status_code == 204
            assert out(server, sandbox_id, "python3", "-c", GETADDRINFO, "example.test") == resolved
        assert server.api("PUT", path, json={"denyOut": ["0.0.0.0/0"]}).status_code == 204
        assert out(server, sandbox_id, "python3", "-c", GETADDRINFO, "example.test") != resolved
    finally:
        server.kill(sandbox_id)


def query(server: UplinkSandboxd, sandbox_id: str, address: str, port: int, proto: str) -> str:
    """What a query for a name no one has (one that could carry data out) got (dns_query.py)."""
    return out(server, sandbox_id, "python3", "-c", script("dns_query"), address, str(port), proto,
               "data-to-smuggle.nosuch.test").strip()  # fmt: skip


def test_a_sandbox_denied_everything_reaches_no_port_of_serve_s(
    server: UplinkSandboxd, net: FakeInternet
) -> None:
    """Denied everything, a sandbox's queries reach no resolver whatever port it tries, the
    forwarder's own ones included, on its gateway or serve's other address; nor does it reach
    the domain proxy's port, which only sandboxes with domain rules (or a tunnel) are offered.
    A sandbox with internet still resolves at its gateway, over UDP and TCP. (Both live past the
    default 15 s, however slow the host.)"""
    dns, proxy = serve_s_ports(net)
    closed = server.create(allow_internet_access=False, timeout=600)
    open_id = server.create(timeout=600)
    refused = str(errno.EHOSTUNREACH)
    try:
        for address in (server.slot(closed).host_ip, UPLINK_ADDRESS):
            for proto, port in ("udp", 53), ("tcp", 53), ("udp", dns["udp"]), ("tcp", dns["tcp"]):
                assert query(server, closed, address, port, proto) == refused, (address, port)
            connected = out(server, closed, "python3", "-c", script("connect"), address, str(proxy))
            assert connected == f"{refused}\n"
        gateway = server.slot(open_id).host_ip
        assert query(server, open_id, gateway, 53, "udp") == "answered"
        assert query(server, open_id, gateway, 53, "tcp") == "answered"
        connected = out(server, open_id, "python3", "-c", script("connect"), gateway, str(proxy))
        assert connected == f"{refused}\n"
    finally:
        server.kill(closed)
        server.kill(open_id)


# One UDP socket to GATEWAY:53 asks for NAME, then again once the test has written to the FIFO
# /tmp/updated (/tmp/asked tells it is there): prints what each query got, as dns_query.py does.
ASK_TWICE = """import os, socket, struct, sys
labels = b"".join(bytes([len(p)]) + p for p in sys.argv[2].encode().split(b".")) + b"\\0"
query = struct.pack(">HHHHHH", 0x5A5A, 0x0100, 1, 0, 0, 0) + labels + struct.pack(">HH", 1, 1)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.IPPROTO_IP, 11, 1)  # IP_RECVERR
sock.connect((sys.argv[1], 53))
sock.settimeout(1)
def ask():
    for _ in range(60):
        try:
            sock.send(query)
            sock.recv(65535)
        except TimeoutError:
            continue
        except OSError as e:
            return str(e.errno)
        return "answered"
    return "no answer"
first = ask()
os.mkfifo("/tmp/updated")
open("/tmp/asked", "w").close()
with open("/tmp/updated") as fifo:
    fifo.read()
print(first, ask())
"""


def test_denied_everything_a_sandbox_s_open_dns_flow_ends_too(server: UplinkSandboxd) -> None:
    """A query on a UDP socket that resolved before the sandbox was denied everything is refused
    like a new one: the firewall lets through as established only replies to what the host
    opened, not the sandbox's own flows to it."""
    sandbox_id = server.create(timeout=600)
    try:
        gateway = server.slot(sandbox_id).host_ip
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            asking = pool.submit(server.run, sandbox_id, "python3", "-c", ASK_TWICE, gateway,
                                 "example.test")  # fmt: skip
            wait_until(lambda: asking.done() or server.run(sandbox_id, "test", "-e",
                                                           "/tmp/asked")[0] == 0, 120, "a query")  # fmt: skip
            assert not asking.done(), asking.result()
            update = {"allow_internet_access": False}
            try:
                assert server.api("PUT", f"/sandboxes/{sandbox_id}/network",
                                  json=update).status_code == 204  # fmt: skip
            finally:
                server.run(sandbox_id, "sh", "-c", "echo > /tmp/updated")
            code, out, err = asking.result()
        assert (code, out) == (0, f"answered {errno.EHOSTUNREACH}\n"), err
    finally:
        server.kill(sandbox_id)


def test_the_forwarder_answers_only_the_pool(server: UplinkSandboxd, net: FakeInternet) -> None:
    """Its ports are refused to the fake internet (reaching serve's address) and to serve's own
    namespace: a sandbox's resolver is no open resolver."""
    ports, _ = serve_s_ports(net)
    assert set(ports) == {"udp", "tcp"}
    for ns, address in ((net.internet, UPLINK_ADDRESS), (net.uplink, "127.0.0.1")):
        refused = ns.call(connect_error, address, int(ports["tcp"]))
        assert refused is not None
        assert refused.errno == errno.EHOSTUNREACH
        refused = ns.call(udp_error, address, int(ports["udp"]))
        assert refused is not None
        assert refused.errno == errno.EHOSTUNREACH


# A resolver on a loopback address, as systemd-resolved's stub is on 127.0.0.53, answering one
# name, over UDP and TCP (TCP tells when it listens).
LOOPBACK_RESOLVER = """import signal
from dnslib.server import DNSLogger, DNSServer
from dnslib.zoneresolver import ZoneResolver
zone = ZoneResolver("loopback.test. 60 IN A 192.0.2.7\\n")
for tcp in (False, True):
    DNSServer(zone, address="127.0.0.53", port=53, tcp=tcp,
              logger=DNSLogger("-request,-reply", prefix=False)).start_thread()
signal.pause()
"""


def test_a_loopback_upstream_is_serve_s_own(fake_internet: FakeInternet, tmp_path: Path) -> None:
    """`--dns 127.0.0.53` (or such a nameserver in serve's resolv.conf): the forwarder asks the
    resolver on serve's loopback, not the sandbox's own (a fresh fake internet: one networked
    serve per namespace)."""
    net = fake_internet
    net.uplink.popen([sys.executable, "-c", LOOPBACK_RESOLVER], stdout=subprocess.DEVNULL)
    wait_until(lambda: net.uplink.call(connect_error, "127.0.0.53", 53) is None, 30, "resolver")
    server = UplinkSandboxd(net, tmp_path / "state", ensure_base_template(), "--dns", "127.0.0.53")
    try:
        server.start()
        sandbox_id = server.create()
        assert out(server, sandbox_id, "getent", "hosts", "loopback.test").split() == [
            "192.0.2.7", "loopback.test"]  # fmt: skip
        server.kill(sandbox_id)
    finally:
        server.clean_up()
