"""The server's routing basics over the wire: health, unknown routes, wrong methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import httpx


def test_health_is_204_no_store(http: httpx.Client) -> None:
    r = http.get("/health")
    assert r.status_code == 204
    assert r.headers["cache-control"] == "no-store"
    assert r.content == b""


def test_unknown_path_is_plain_404(http: httpx.Client) -> None:
    r = http.get("/no/such/route")
    assert r.status_code == 404
    assert r.text == "404 page not found\n"


@pytest.mark.parametrize(("method", "path"), [("GET", "/health/"), ("POST", "/files/compose/")])
def test_trailing_slash_is_404_not_a_redirect(http: httpx.Client, method: str, path: str) -> None:
    # The reference's router has no such routes; Starlette would redirect to the slashless one.
    r = http.request(method, path)
    assert r.status_code == 404
    assert r.text == "404 page not found\n"


def test_wrong_method_is_405(http: httpx.Client) -> None:
    assert http.post("/health").status_code == 405


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_wrong_method_on_files_is_405(http: httpx.Client, method: str) -> None:
    # GET and POST /files skip the router (envd.http.endpoint); other methods still reach it.
    r = http.request(method, "/files", params={"path": "/tmp/x"})
    assert r.status_code == 405
    assert r.content == b""
    assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD"}  # the first /files route's


def test_version_flag_prints_claimed_version() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "envd", "-version"], capture_output=True, text=True, check=True
    )
    assert out.stdout == "0.6.4\n"
