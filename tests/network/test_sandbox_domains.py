"""Domains in allowOut, as a user sees them: `sandboxd serve --network-pool` inside the fake
internet's `uplink`, and a sandbox whose HTTP (port 80, by its Host header) and HTTPS (443, by
the ClientHello's SNI) go through the domain proxy: an allowed name reaches its own server
whatever address the client chose, other names are accepted and closed, allowOut addresses and
CIDRs still go where they were sent, names that resolve to what is always denied (or to the
host itself) stay refused, and an update switches the names for new connections. With an
`egressProxy`, every permitted TCP connection goes through the fake internet's SOCKS5 server,
allowed names as names."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import pytest

from sandboxd.network.egress_proxy.server import MAX_CONNECTIONS_PER_SANDBOX
from tests.network import probes
from tests.network.fake_internet import (
    DNS_ADDRESS,
    NAMES,
    SOCKS_ADDRESS,
    SOCKS_PASSWORD,
    SOCKS_USER,
    UPLINK_ADDRESS,
    running_fake_internet,
)
from tests.network.served import POOL, UplinkSandboxd
from tests.network.test_sandbox_egress import REFUSED, connect, leftovers
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

EXAMPLE, SUB, OTHER = NAMES["example.test"], NAMES["a.example.test"], NAMES["other.test"]
EVIL = "198.51.100.13"
# Served by the fake internet (the metadata service's address on its loopback): a proxy that
# dialled it would get an answer.
METADATA = "169.254.169.254"
# GET / from ADDRESS:PORT asking for NAME (Host, and SNI with "tls"): the echo's JSON, "closed"
# when the connection was accepted and closed, or the errno of a refusal.
GET = """import socket, ssl, sys
address, port, name, tls = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "tls"
try:
    sock = socket.create_connection((address, port), timeout=30)
    if tls:
        sock = ssl.create_default_context(cafile="/tmp/ca.pem").wrap_socket(
            sock, server_hostname=name)
    sock.sendall(f"GET / HTTP/1.1\\r\\nHost: {name}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError, BrokenPipeError):
    print("closed")
except OSError as e:
    print(e.errno or type(e).__name__)
else:
    print(data.partition(b"\\r\\n\\r\\n")[2].decode() or "closed")
"""
DOMAINS_ONLY = {"allowOut": ["example.test"], "denyOut": ["0.0.0.0/0"]}
TUNNEL = {"address": f"{SOCKS_ADDRESS}:1080", "username": SOCKS_USER, "password": SOCKS_PASSWORD}


@pytest.fixture(scope="module")
def net() -> Iterator[FakeInternet]:
    names = {**NAMES, "example.test.evil": EVIL, "metadata.test": METADATA}
    with running_fake_internet(names, dns_only={"host.test": UPLINK_ADDRESS}) as net:
        yield net


@pytest.fixture(scope="module")
def server(net: FakeInternet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UplinkSandboxd]:
    state = tmp_path_factory.mktemp("domains") / "state"
    server = UplinkSandboxd(net, state, ensure_base_template(), "--network-pool", POOL,
                            "--dns", DNS_ADDRESS, "--pool", "1")  # fmt: skip
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


@pytest.fixture
def sandbox(server: UplinkSandboxd, net: FakeInternet) -> Iterator[str]:
    """A sandbox allowed example.test only, trusting the fake internet's CA."""
    sandbox_id = server.create(network=DOMAINS_ONLY)
    try:
        code, _, err = server.run(sandbox_id, "python3", "-c",
                                  "import sys; open('/tmp/ca.pem', 'w').write(sys.argv[1])",
                                  net.ca_pem.read_text())  # fmt: skip
        assert code == 0, err
        yield sandbox_id
    finally:
        server.kill(sandbox_id)


def get(server: UplinkSandboxd, sandbox_id: str, address: str, name: str, tls: bool = False) -> Any:
    """What GET gave: the echo's JSON (as a dict) or "closed" or an errno."""
    port = "443" if tls else "80"
    code, out, err = server.run(sandbox_id, "python3", "-c", GET, address, port, name,
                                "tls" if tls else "plain")  # fmt: skip
    assert code == 0, err
    out = out.strip()
    return json.loads(out) if out.startswith("{") else out


def test_an_allowed_name_goes_through_and_no_other(server: UplinkSandboxd, sandbox: str) -> None:
    """curl by name, over HTTP and HTTPS (the name resolved by the sandbox's resolver, which
    domains allow); other names are accepted and closed, other ports refused by address."""
    for url, tls in (("http://example.test/", False), ("https://example.test/", True)):
        code, out, err = server.run(sandbox, "curl", "-sS", "--cacert", "/tmp/ca.pem", url)
        assert code == 0, err
        echo = json.loads(out)
        assert (echo["server"], echo["host"], echo["tls"]) == (EXAMPLE, "example.test", tls)
    assert get(server, sandbox, OTHER, "other.test") == "closed"
    assert get(server, sandbox, OTHER, "other.test", tls=True) == "closed"
    assert get(server, sandbox, OTHER, OTHER) == "closed"  # no name: judged by the address
    code, _, _ = server.run(sandbox, "curl", "-sS", "http://other.test/")
    assert code != 0
    assert connect(server, sandbox, EXAMPLE, 8080) == REFUSED  # not proxied: addresses only
    assert connect(server, sandbox, OTHER, 22) == REFUSED


def test_a_forged_name_reaches_the_named_server_only(server: UplinkSandboxd, sandbox: str) -> None:
    """The proxy dials the allowed name's own address, never the one the client chose."""
    assert get(server, sandbox, OTHER, "example.test")["server"] == EXAMPLE
    assert get(server, sandbox, OTHER, "EXAMPLE.test.")["server"] == EXAMPLE  # the same name
    forged = get(server, sandbox, OTHER, "example.test", tls=True)
    assert (forged["server"], forged["tls"]) == (EXAMPLE, True), forged
    assert get(server, sandbox, EXAMPLE, "other.test") == "closed"
    assert get(server, sandbox, EXAMPLE, "other.test", tls=True) == "closed"


def test_wildcards_match_subdomains_only(server: UplinkSandboxd) -> None:
    sandbox = server.create(network={"allowOut": ["*.example.test"], "denyOut": ["0.0.0.0/0"]})
    try:
        assert get(server, sandbox, SUB, "a.example.test")["server"] == SUB
        assert get(server, sandbox, OTHER, "A.Example.Test")["server"] == SUB
        assert get(server, sandbox, EXAMPLE, "example.test") == "closed"
        assert get(server, sandbox, EVIL, "example.test.evil") == "closed"
    finally:
        server.kill(sandbox)


def test_allowed_addresses_still_go_where_they_were_sent(server: UplinkSandboxd) -> None:
    network = {"allowOut": ["example.test", f"{OTHER}/32"], "denyOut": ["0.0.0.0/0"]}
    sandbox = server.create(network=network)
    try:
        assert get(server, sandbox, OTHER, "whatever.test")["server"] == OTHER
        assert get(server, sandbox, OTHER, OTHER)["server"] == OTHER
        assert connect(server, sandbox, OTHER, 22) == str(111)  # through: nothing listens there
        assert get(server, sandbox, EVIL, "whatever.test") == "closed"
    finally:
        server.kill(sandbox)


def test_names_resolving_to_what_is_denied_stay_refused(
    server: UplinkSandboxd, net: FakeInternet, tmp_path: Path
) -> None:
    """A name may resolve to anything: the metadata address (served here, so a proxy dialling it
    would get an answer) and the host's own address (a server of `uplink`'s listens on its port
    80) are never dialled."""
    host_server = net.uplink.popen([sys.executable, "-m", "http.server", "80", "--bind",
                                    UPLINK_ADDRESS, "--directory", str(tmp_path)])  # fmt: skip
    network = {"allowOut": ["metadata.test", "host.test"], "denyOut": ["0.0.0.0/0"]}
    sandbox = server.create(network=network)
    try:
        wait_until(lambda: net.uplink.call(probes.connect_error, UPLINK_ADDRESS, 80) is None, 30,
                   "uplink's own server to listen")  # fmt: skip
        assert net.uplink.call(probes.get, METADATA, "metadata.test")["server"] == METADATA
        assert get(server, sandbox, OTHER, "metadata.test") == "closed"
        assert get(server, sandbox, OTHER, "host.test") == "closed"
        assert get(server, sandbox, METADATA, "metadata.test") == REFUSED  # never redirected
        assert get(server, sandbox, UPLINK_ADDRESS, "host.test") == REFUSED
    finally:
        server.kill(sandbox)
        host_server.terminate()
        host_server.wait()


def test_an_update_switches_the_names(server: UplinkSandboxd, net: FakeInternet) -> None:
    """PUT /sandboxes/{id}/network: the proxy's view and the redirect change together; without
    domains nothing is proxied any more, and a kill leaves neither chain behind."""
    sandbox = server.create(network=DOMAINS_ONLY)
    path = f"/sandboxes/{sandbox}/network"
    try:
        assert get(server, sandbox, OTHER, "example.test")["server"] == EXAMPLE
        update = {"allowOut": ["other.test"], "denyOut": ["0.0.0.0/0"]}
        assert server.api("PUT", path, json=update).status_code == 204
        assert get(server, sandbox, OTHER, "example.test") == "closed"
        assert get(server, sandbox, EXAMPLE, "other.test")["server"] == OTHER
        assert server.api("PUT", path, json={}).status_code == 204
        assert get(server, sandbox, OTHER, "example.test")["server"] == OTHER  # as addressed
        assert server.api("PUT", path, json={"denyOut": ["example.test"]}).status_code == 400
        assert server.api("PUT", path, json=DOMAINS_ONLY).status_code == 204
        assert get(server, sandbox, OTHER, "example.test")["server"] == EXAMPLE
    finally:
        server.kill(sandbox)
    assert leftovers(server, net) == []


def test_a_restarted_serve_gives_the_names_back(server: UplinkSandboxd, sandbox: str) -> None:
    """The new serve's proxy (on a port of its own) takes over the adopted sandbox's names."""
    server.stop()
    server.start()
    assert get(server, sandbox, OTHER, "example.test")["server"] == EXAMPLE
    assert get(server, sandbox, EXAMPLE, "other.test") == "closed"


def tunnelled(net: FakeInternet) -> list[dict[str, object]]:
    """The CONNECTs the SOCKS5 server was asked for so far."""
    return [json.loads(line) for line in net.socks_log.read_text().splitlines()]


# Opens COUNT connections to ADDRESS:80 asking for example.test, each answered and then kept open
# idle, and holds them until the test writes to the FIFO /tmp/release (/tmp/held tells it is
# there); prints how many it held.
HOLD = """import os, socket, sys
held = []
for _ in range(int(sys.argv[2])):
    sock = socket.create_connection((sys.argv[1], 80), timeout=30)
    sock.sendall(b"GET / HTTP/1.1\\r\\nHost: example.test\\r\\n\\r\\n")
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(held)}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    held.append(sock)
os.mkfifo("/tmp/release")
open("/tmp/held", "w").close()
with open("/tmp/release") as fifo:
    fifo.read()
print(len(held))
"""


def test_a_sandbox_holds_a_bounded_number_of_proxied_connections(server: UplinkSandboxd) -> None:
    """With MAX_CONNECTIONS_PER_SANDBOX connections through the domain proxy held open, the
    sandbox's next one is closed at once while a neighbour's goes through; once they end, the
    sandbox connects again. (Both live past the default 15 s, however slow the host.)"""
    sandbox = server.create(network=DOMAINS_ONLY, timeout=600)
    neighbour = server.create(network=DOMAINS_ONLY, timeout=600)
    limit = MAX_CONNECTIONS_PER_SANDBOX
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            holding = pool.submit(server.run, sandbox, "python3", "-c", HOLD, EXAMPLE, str(limit))
            wait_until(lambda: holding.done() or server.run(sandbox, "test", "-e", "/tmp/held")[0]
                       == 0, 120, f"{limit} connections held")  # fmt: skip
            assert not holding.done(), holding.result()
            try:
                assert get(server, sandbox, EXAMPLE, "example.test") == "closed"
                assert get(server, neighbour, EXAMPLE, "example.test")["server"] == EXAMPLE
            finally:
                server.run(sandbox, "sh", "-c", "echo > /tmp/release")
            assert holding.result() == (0, f"{limit}\n", "")
        wait_until(lambda: isinstance(get(server, sandbox, EXAMPLE, "example.test"), dict), 60,
                   "the held connections to end")  # fmt: skip
    finally:
        server.kill(sandbox)
        server.kill(neighbour)


def test_an_egress_proxy_carries_every_tcp_connection(
    server: UplinkSandboxd, net: FakeInternet
) -> None:
    """E2B's egressProxy: the sandbox connects as ever, the SOCKS5 server connects out (with
    the credentials given); a port the domain proxy does not read goes through it too."""
    sandbox = server.create(network={"egressProxy": TUNNEL})
    try:
        seen = len(tunnelled(net))
        echo = get(server, sandbox, OTHER, "other.test")
        assert (echo["server"], echo["client"]) == (OTHER, SOCKS_ADDRESS)
        assert tunnelled(net)[seen:] == [{"kind": "ipv4", "host": OTHER, "port": 80}]
        assert connect(server, sandbox, OTHER, 8080) == "connected"  # the proxy took it
        wait_until(lambda: len(tunnelled(net)) > seen + 1, 30, "the CONNECT to port 8080")
        assert tunnelled(net)[seen + 1] == {"kind": "ipv4", "host": OTHER, "port": 8080}
    finally:
        server.kill(sandbox)


def test_allowed_names_go_through_the_egress_proxy_as_names(
    server: UplinkSandboxd, net: FakeInternet
) -> None:
    """A name allowed by allowOut is sent to the SOCKS server as a name (it resolves it); a
    refused one never reaches it; an update without the proxy goes direct again."""
    sandbox = server.create(network={**DOMAINS_ONLY, "egressProxy": TUNNEL})
    path = f"/sandboxes/{sandbox}/network"
    try:
        seen = len(tunnelled(net))
        echo = get(server, sandbox, OTHER, "example.test")
        assert (echo["server"], echo["client"]) == (EXAMPLE, SOCKS_ADDRESS)
        assert get(server, sandbox, OTHER, "other.test") == "closed"
        assert tunnelled(net)[seen:] == [{"kind": "domain", "host": "example.test", "port": 80}]
        assert server.api("PUT", path, json=DOMAINS_ONLY).status_code == 204
        assert get(server, sandbox, OTHER, "example.test")["client"] == UPLINK_ADDRESS
        bad = {**DOMAINS_ONLY, "egressProxy": {"address": "socks.test"}}
        assert server.api("PUT", path, json=bad).status_code == 400
    finally:
        server.kill(sandbox)
