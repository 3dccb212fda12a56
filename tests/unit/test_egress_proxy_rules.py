"""The domain proxy's pure parts: which allowOut entries are domains and what a name matches
(E2B's rules), the name read from an HTTP request head or a TLS ClientHello, and the verdict on
a connection. The proxy over the wire is tested in tests/network/test_sandbox_domains.py."""

from __future__ import annotations

import ipaddress
import ssl

import pytest

from sandboxd.network.egress_proxy import sniff
from sandboxd.network.egress_proxy.names import is_domain_entry, matches
from sandboxd.network.egress_proxy.policy import (
    REFUSED,
    SandboxRules,
    Verdict,
    decide,
    networks,
    usable,
)
from sandboxd.network.firewall import never_reachable


@pytest.mark.parametrize(
    ("name", "entry", "matched"),
    [
        ("example.com", "example.com", True),
        ("EXAMPLE.com.", "example.COM", True),
        ("example.com", "example.com.", True),
        ("a.example.com", "example.com", False),
        ("a.example.com", "*.example.com", True),
        ("b.a.example.com", "*.example.com", True),
        ("example.com", "*.example.com", False),
        ("example.com.evil", "*.example.com", False),
        ("example.com.evil", "example.com", False),
        ("badexample.com", "*.example.com", False),
        ("anything.test", "*", True),
        ("", "*", False),
    ],
)
def test_a_name_matches_as_in_e2b(name: str, entry: str, matched: bool) -> None:
    assert matches(name, entry) is matched


@pytest.mark.parametrize(
    ("entry", "domain"),
    [("example.com", True), ("*.example.com", True), ("*", True), ("_svc.a-b.test.", True),
     ("1.2.3.4", False), ("10.0.0.0/8", False), ("::1", False), ("a..b", False),
     ("-a.test", False), ("a.test:443", False), ("http://a.test", False), ("*a.test", False),
     ("a.*.test", False), ("", False), ("x" * 64 + ".test", False)],
)  # fmt: skip
def test_domain_entries(entry: str, domain: bool) -> None:
    assert is_domain_entry(entry) is domain


@pytest.mark.parametrize(
    ("head", "host"),
    [
        (b"GET / HTTP/1.1\r\nHost: example.test\r\n\r\n", "example.test"),
        (b"GET / HTTP/1.1\r\nhOST: Example.test:8080\r\nX: y\r\n\r\nbody", "Example.test"),
        (b"GET / HTTP/1.1\r\nHost: 198.51.100.10\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", None),
        (b"\x16\x03\x01garbage\r\n\r\n", None),
    ],
)
def test_the_host_of_a_request_head(head: bytes, host: str | None) -> None:
    assert sniff.http_host(head) == host


def test_a_request_head_not_ended_asks_for_more() -> None:
    with pytest.raises(sniff._Incomplete):
        sniff.http_host(b"GET / HTTP/1.1\r\nHost: example.test\r\n")


def client_hello(server_name: str | None) -> bytes:
    """What Python's TLS client sends first, asking for `server_name`."""
    context = ssl.create_default_context()
    if server_name is None:
        context.check_hostname = False
    tls = context.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def test_the_server_name_of_a_client_hello() -> None:
    hello = client_hello("a.example.test")
    assert sniff.tls_server_name(hello) == "a.example.test"
    assert sniff.tls_server_name(client_hello(None)) is None
    for cut in (3, 5, 40, len(hello) - 1):  # arriving in pieces: wait for the rest
        with pytest.raises(sniff._Incomplete):
            sniff.tls_server_name(hello[:cut])
    assert sniff.tls_server_name(b"GET / HTTP/1.1\r\n\r\n") is None


def test_a_client_hello_split_over_records() -> None:
    hello = client_hello("example.test")
    body = hello[5:]
    records = b"".join(hello[:3] + len(part).to_bytes(2, "big") + part
                       for part in (body[:100], body[100:]))  # fmt: skip
    assert sniff.tls_server_name(records) == "example.test"


RULES = SandboxRules(
    ipaddress.IPv4Address("10.11.0.1"),
    allow=networks(("203.0.113.0/24",)),
    deny=networks(("0.0.0.0/0",)),
    domains=("example.test", "*.a.test"),
)
ALLOWED = ipaddress.IPv4Address("203.0.113.9")
ELSEWHERE = ipaddress.IPv4Address("198.51.100.12")


def test_verdicts_as_e2b() -> None:
    assert decide(RULES, ALLOWED, "other.test") == Verdict(address=ALLOWED)  # a CIDR: as sent
    assert decide(RULES, ELSEWHERE, "example.test") == Verdict(name="example.test")
    assert decide(RULES, ELSEWHERE, "b.a.test") == Verdict(name="b.a.test")
    assert decide(RULES, ELSEWHERE, "a.test") == REFUSED
    assert decide(RULES, ELSEWHERE, None) == REFUSED
    open_rules = SandboxRules(RULES.gateway, (), (), ("example.test",))
    assert decide(open_rules, ELSEWHERE, "other.test") == Verdict(address=ELSEWHERE)


def test_resolved_addresses_never_dialled() -> None:
    never = never_reachable(ipaddress.IPv4Network("10.11.0.0/16"))
    for address in ("169.254.169.254", "127.0.0.1", "10.11.0.1", "192.168.1.1", "0.0.0.0"):
        assert not usable(ipaddress.IPv4Address(address), never), address
    assert usable(ELSEWHERE, never)
