"""A sandbox's way out through the unmodified Python SDK: default access reaches the fake
internet (curl, and pip from its package index), `allow_internet_access=False` and the
`network` rules of `Sandbox.create` apply, `update_network` replaces them on a running sandbox,
and what is always denied stays denied under every rule set."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from e2b import ALL_TRAFFIC, CommandExitException, Sandbox, SandboxNotFoundException

from tests.network import package_index
from tests.sdk.network.probes import (
    CONNECTED,
    REFUSED,
    addresses,
    connect,
    curl,
    pip_install,
)
from tests.sdk.python.sandboxes import create

if TYPE_CHECKING:
    from tests.sdk.network.conftest import FakeInternet


def test_default_access_reaches_the_internet_and_its_package_index(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    sandbox = create(made)
    echo = curl(sandbox, internet.http)
    assert echo["server"] == internet.http
    assert echo["client"] == internet.uplink  # masqueraded: the internet never sees the pool
    assert pip_install(sandbox, internet.index) == package_index.GREETING


def test_no_internet_access(made: list[Sandbox], internet: FakeInternet) -> None:
    sandbox = create(made, allow_internet_access=False)
    assert connect(sandbox, internet.http, 80) == REFUSED
    assert connect(sandbox, internet.index, 80) == REFUSED
    with pytest.raises(CommandExitException):
        pip_install(sandbox, internet.index)


def test_an_allowed_address_beats_denying_all_traffic(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    # The SDK's own form: deny_out as a callable of its selector context.
    network = {"allow_out": [internet.http], "deny_out": lambda ctx: [ctx.all_traffic]}
    sandbox = create(made, network=network)
    assert connect(sandbox, internet.http, 80) == CONNECTED
    assert connect(sandbox, internet.other, 80) == REFUSED
    assert curl(sandbox, internet.http)["server"] == internet.http


def test_update_network_replaces_the_rules_of_a_running_sandbox(
    made: list[Sandbox], internet: FakeInternet
) -> None:
    sandbox = create(made, network={"deny_out": [internet.other]})
    assert connect(sandbox, internet.other, 80) == REFUSED
    assert connect(sandbox, internet.http, 80) == CONNECTED

    sandbox.update_network({"allow_internet_access": False})
    assert connect(sandbox, internet.http, 80) == REFUSED
    assert sandbox.get_info().allow_internet_access is False

    # The static form, by ID, as another process would call it.
    Sandbox.update_network(
        sandbox.sandbox_id, {"allow_out": [internet.http], "deny_out": [ALL_TRAFFIC]}
    )
    assert connect(sandbox, internet.http, 80) == CONNECTED
    assert connect(sandbox, internet.other, 80) == REFUSED

    sandbox.update_network({})  # every field left out is cleared: default access again
    assert connect(sandbox, internet.other, 80) == CONNECTED
    assert curl(sandbox, internet.other)["server"] == internet.other

    with pytest.raises(SandboxNotFoundException):
        Sandbox.update_network("nosuchsandbox", {})


def test_always_denied_under_every_rule_set(made: list[Sandbox], internet: FakeInternet) -> None:
    """The metadata address, serve (its API port on the sandbox's gateway and on `uplink`'s
    address) and another sandbox stay out of reach whatever the rules say, even rules naming
    them: at create and after each update."""
    sandbox, neighbour = create(made), create(made)
    _, gateway = addresses(sandbox)
    neighbour_address, _ = addresses(neighbour)
    denied = [("169.254.169.254", 80), (gateway, internet.api_port),
              (internet.uplink, internet.api_port), (neighbour_address, 49983)]  # fmt: skip
    named = [f"{address}/32" for address, _ in denied]
    # Each rule set, and whether it lets the echo server through.
    rule_sets = [
        (None, CONNECTED),  # the create's: default access
        ({"allow_out": [ALL_TRAFFIC]}, CONNECTED),
        ({"allow_out": named, "deny_out": [ALL_TRAFFIC]}, REFUSED),
        ({"allow_out": [*named, internet.http]}, CONNECTED),
        ({"deny_out": [internet.other]}, CONNECTED),
        ({}, CONNECTED),
    ]
    for rules, echo in rule_sets:
        if rules is not None:
            sandbox.update_network(rules)
        for address, port in denied:
            assert (rules, address, connect(sandbox, address, port)) == (rules, address, REFUSED)
        assert (rules, connect(sandbox, internet.http, 80)) == (rules, echo)

    allowing = create(made, network={"allow_out": named, "deny_out": [ALL_TRAFFIC]})
    for address, port in denied:
        assert connect(allowing, address, port) == REFUSED
