"""Domains in `allow_out` through the unmodified Python SDK: a sandbox allowed example.test with
all other traffic denied reaches it by name over HTTP and HTTPS (HTTP judged by its Host header,
HTTPS by its ClientHello's SNI) and no other name; `*.example.test` matches subdomains only; a
name forged onto another server's address still reaches the named server only; and
`update_network` switches the allowed name of a running sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

from e2b import ALL_TRAFFIC

from tests.sdk.network.probes import fetch, trust
from tests.sdk.python.sandboxes import create

if TYPE_CHECKING:
    from e2b import Sandbox

    from tests.sdk.network.conftest import FakeInternet

# curl's exit codes when the domain proxy accepts a connection for a name it refuses and closes
# it: before any HTTP answer (52, "Empty reply from server"), or during the TLS handshake (35).
NO_REPLY, NO_HANDSHAKE = 52, 35


def trusting(made: list[Sandbox], internet: FakeInternet, network: object) -> Sandbox:
    """A sandbox with these network rules, trusting the fake internet's CA."""
    sandbox = create(made, network=network)
    trust(sandbox, internet.ca)
    return sandbox


def test_an_allowed_name_goes_through_and_no_other(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    # The SDK's own form: deny_out as a callable of its selector context.
    network = {"allow_out": ["example.test"], "deny_out": lambda ctx: [ctx.all_traffic]}
    sandbox = trusting(made, internet, network)
    for url, tls in (("http://example.test/", False), ("https://example.test/", True)):
        echo = fetch(sandbox, url)
        assert (echo["server"], echo["host"], echo["tls"]) == (internet.http, "example.test", tls)
    assert fetch(sandbox, "http://other.test/") == NO_REPLY
    assert fetch(sandbox, "https://other.test/") == NO_HANDSHAKE


def test_a_forged_name_reaches_the_named_server_only(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    """curl sends example.test (SNI, Host) to other.test's address: the proxy dials
    example.test's own address, never the one the client chose."""
    sandbox = trusting(made, internet, {"allow_out": ["example.test"], "deny_out": [ALL_TRAFFIC]})
    for url, port, tls in (
        ("https://example.test/", 443, True),
        ("http://example.test/", 80, False),
    ):
        forged = fetch(sandbox, url, "--resolve", f"example.test:{port}:{internet.other}")
        assert (forged["server"], forged["tls"]) == (internet.http, tls), forged
    # The other way round: an allowed address does not let another name through.
    other = fetch(sandbox, "https://other.test/", "--resolve", f"other.test:443:{internet.http}")
    assert other == NO_HANDSHAKE


def test_wildcards_match_subdomains_only(made: list[Sandbox], internet: FakeInternet) -> None:
    sandbox = trusting(made, internet, {"allow_out": ["*.example.test"], "deny_out": [ALL_TRAFFIC]})
    assert fetch(sandbox, "https://a.example.test/")["server"] == internet.sub
    assert fetch(sandbox, "http://a.example.test/")["server"] == internet.sub
    assert fetch(sandbox, "https://example.test/") == NO_HANDSHAKE
    assert fetch(sandbox, "http://example.test/") == NO_REPLY


def test_update_network_switches_the_allowed_name(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    sandbox = trusting(made, internet, {"allow_out": ["example.test"], "deny_out": [ALL_TRAFFIC]})
    assert fetch(sandbox, "https://example.test/")["server"] == internet.http
    assert fetch(sandbox, "https://other.test/") == NO_HANDSHAKE

    sandbox.update_network({"allow_out": ["other.test"], "deny_out": [ALL_TRAFFIC]})
    assert fetch(sandbox, "https://other.test/")["server"] == internet.other
    assert fetch(sandbox, "https://example.test/") == NO_HANDSHAKE
    assert fetch(sandbox, "http://example.test/") == NO_REPLY

    sandbox.update_network({})  # no rules: both names, as addressed, and nothing proxied
    assert fetch(sandbox, "https://example.test/")["server"] == internet.http
    addressed = fetch(
        sandbox, "http://example.test/", "--resolve", f"example.test:80:{internet.other}"
    )
    assert addressed["server"] == internet.other
