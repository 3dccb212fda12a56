"""Fixtures for the SDK's networking tests (run by tests/network/test_sdk_network.py, inside
the fake internet's `uplink`, against `sandboxd serve --network-pool` there): what the fake
internet holds, from FAKE_INTERNET (JSON), and the sandboxes a test makes, killed afterwards."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest

from tests.sdk.python import sandboxes

made = sandboxes.made  # the sandboxes a test makes, killed afterwards


@dataclass(frozen=True)
class FakeInternet:
    """Addresses of the fake internet and of serve, as the harness passes them."""

    http: str  # an echo server (HTTP on :80, HTTPS on :443), example.test
    sub: str  # another, a.example.test
    other: str  # another echo server, other.test
    index: str  # the package index
    package: dict[str, str]  # its one package (the Python suite reads package_index instead)
    uplink: str  # serve's namespace's address on the fake internet
    ca: str  # the CA (PEM) of the echo servers' certificates
    api_port: int  # serve's API and proxy port, on every address of `uplink`


@pytest.fixture(scope="session")
def internet() -> FakeInternet:
    facts = os.environ.get("FAKE_INTERNET")
    if facts is None:
        pytest.exit("run by tests/network/test_sdk_network.py, inside the fake internet")
    return FakeInternet(**json.loads(facts))
