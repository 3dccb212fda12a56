"""Signed /files URLs and the access token on a daemon whose token /init has set."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx
import pytest

from envd.http.signing import file_signature
from tests.envd_process import TRACEBACK_MARKER, start_envd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TOKEN = "files-secret-token"  # noqa: S105 - a test token
OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One daemon with a token for the module: the tests only read its state."""
    daemon = start_envd(tmp_path_factory.mktemp("envd-logs"))
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            assert client.post("/init", json={"accessToken": TOKEN}).status_code == 204
            yield client
    finally:
        daemon.stop()
        assert TRACEBACK_MARKER not in daemon.logs()


def _signed(
    path: str, operation: str, username: str = "", expiration: int | None = None
) -> dict[str, str]:
    params = {
        "path": path,
        "signature": file_signature(path, operation, username, TOKEN, expiration),
    }
    if username:
        params["username"] = username
    if expiration is not None:
        params["signature_expiration"] = str(expiration)
    return params


def test_signed_download_and_upload(guarded: httpx.Client, workdir: Path) -> None:
    target = str(workdir / "signed.txt")
    up = guarded.post("/files", params=_signed(target, "write"), content=b"data", headers=OCTET)
    assert up.status_code == 200
    down = guarded.get("/files", params=_signed(target, "read"))
    assert (down.status_code, down.content) == (200, b"data")


def test_signature_without_expiration_never_expires(guarded: httpx.Client, workdir: Path) -> None:
    (workdir / "f").write_bytes(b"x")
    assert guarded.get("/files", params=_signed(str(workdir / "f"), "read")).status_code == 200
    future = int(time.time()) + 60
    params = _signed(str(workdir / "f"), "read", expiration=future)
    assert guarded.get("/files", params=params).status_code == 200


def test_expired_signature(guarded: httpx.Client, workdir: Path) -> None:
    (workdir / "f").write_bytes(b"x")
    params = _signed(str(workdir / "f"), "read", expiration=int(time.time()) - 10)
    r = guarded.get("/files", params=params)
    assert r.status_code == 401
    assert r.content == b'{"code":401,"message":"signature is already expired"}\n'


def test_signed_missing_file_is_404(guarded: httpx.Client) -> None:
    path = "/home/user/demo/test.txt"
    r = guarded.get("/files", params=_signed(path, "read", "user"))
    assert r.content == f'{{"code":404,"message":"path \'{path}\' does not exist"}}\n'.encode()


@pytest.mark.parametrize(
    ("signed_as", "sent"),
    [
        # A signature for /home/user/a does not open anything else, traversal included.
        (("/home/user/a", "read", "user"), {"path": "/home/user/../../etc/passwd"}),
        (("/home/user/a", "read", "user"), {"username": "root"}),
        (("/home/user/a", "write", "user"), {}),  # a write signature used to read
        (("/home/user/a", "read", "user"), {"signature_expiration": "99999999999"}),
    ],
)
def test_signature_for_something_else_is_401(
    guarded: httpx.Client, signed_as: tuple[str, str, str], sent: dict[str, str]
) -> None:
    path, operation, username = signed_as
    params = {
        "path": path,
        "username": username,
        "signature": file_signature(path, operation, username, TOKEN, None),
        **sent,
    }
    r = guarded.get("/files", params=params)
    assert r.status_code == 401
    assert r.json() == {"code": 401, "message": "invalid signature"}


def test_missing_signature_and_header_token(guarded: httpx.Client, workdir: Path) -> None:
    (workdir / "f").write_bytes(b"x")
    params = {"path": str(workdir / "f")}
    missing = guarded.get("/files", params=params)
    assert missing.json() == {"code": 401, "message": "missing signature query parameter"}
    bypass = guarded.get("/files", params=params, headers={"X-Access-Token": TOKEN})
    assert bypass.status_code == 200
    wrong = guarded.get("/files", params=params, headers={"X-Access-Token": "nope"})
    assert wrong.json() == {
        "code": 401,
        "message": "access token present in header but does not match",
    }


def test_compose_needs_the_token(guarded: httpx.Client, workdir: Path) -> None:
    (workdir / "s").write_bytes(b"x")
    body = {"source_paths": [str(workdir / "s")], "destination": str(workdir / "d")}
    assert guarded.post("/files/compose", json=body).status_code == 401
    ok = guarded.post("/files/compose", json=body, headers={"X-Access-Token": TOKEN})
    assert ok.status_code == 200
