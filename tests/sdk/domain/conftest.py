"""The Python SDK in E2B's domain mode (run by tests/network/test_sdk_domain.py, inside the fake
internet's `uplink`, against `sandboxd serve` on 443 with a certificate of its own CA there):
configured by E2B_DOMAIN alone, trusting the CA by SSL_CERT_FILE, resolving `api.DOMAIN` and
`{port}-{id}.DOMAIN` by DNS."""

from __future__ import annotations

import os

import pytest

from tests.sdk.python import sandboxes

made = sandboxes.made  # the sandboxes a test makes, killed afterwards


@pytest.fixture(scope="session", autouse=True)
def domain_mode() -> None:
    if "E2B_DOMAIN" not in os.environ or "SSL_CERT_FILE" not in os.environ:
        pytest.exit("run by tests/network/test_sdk_domain.py, inside the fake internet")
    if "E2B_API_URL" in os.environ or "E2B_SANDBOX_URL" in os.environ:
        pytest.exit("domain mode: E2B_DOMAIN alone, without E2B_API_URL or E2B_SANDBOX_URL")
