"""Malformed requests on the raw wire: clear Connect errors, and the daemon keeps serving."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from tests.envd_process import EnvdProcess

STAT = "/filesystem.Filesystem/Stat"
JSON = {"content-type": "application/json"}


def _still_serving(envd: EnvdProcess) -> None:
    with httpx.Client(base_url=envd.url) as fresh:
        r = fresh.post(STAT, content=b'{"path": "/"}', headers=JSON)
        assert r.status_code == 200
        assert r.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"


@pytest.mark.parametrize("body", [b"{not json", b'{"path": 5}', b"[]", b"\xff\xfe"])
def test_malformed_json_is_invalid_argument(envd: EnvdProcess, body: bytes) -> None:
    with httpx.Client(base_url=envd.url) as client:
        r = client.post(STAT, content=body, headers=JSON)
        assert r.status_code == 400
        assert r.json()["code"] == "invalid_argument"
        # The same keep-alive connection still works.
        assert client.post(STAT, content=b'{"path": "/"}', headers=JSON).status_code == 200
    _still_serving(envd)


def test_message_over_the_cap_is_resource_exhausted(envd: EnvdProcess) -> None:
    # The SDKs' and connectrpc's default maximum message size, 4 MiB.
    body = b'{"path": "/' + b"a" * (4 * 1024 * 1024) + b'"}'
    with httpx.Client(base_url=envd.url) as client:
        r = client.post(STAT, content=body, headers=JSON)
        assert r.status_code == 429
        assert r.json()["code"] == "resource_exhausted"
        assert client.post(STAT, content=b'{"path": "/"}', headers=JSON).status_code == 200


def test_wrong_content_type_is_415(envd: EnvdProcess) -> None:
    r = httpx.post(envd.url + STAT, content=b'{"path": "/"}', headers={"content-type": "text/xml"})
    assert r.status_code == 415
    _still_serving(envd)


def test_nul_byte_in_path(envd: EnvdProcess, workdir: Path) -> None:
    body = b'{"path": "' + str(workdir).encode() + b'/a\\u0000b"}'
    r = httpx.post(envd.url + STAT, content=body, headers=JSON)
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_argument"
    _still_serving(envd)


def test_lone_surrogate_escape_in_path(envd: EnvdProcess) -> None:
    r = httpx.post(envd.url + STAT, content=b'{"path": "/tmp/\\udcff"}', headers=JSON)
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_argument"
    _still_serving(envd)


def test_invalid_utf8_in_binary_path(envd: EnvdProcess) -> None:
    body = b"\x0a\x06/tmp/\xff"  # StatRequest.path (field 1) holding a non-UTF-8 byte
    r = httpx.post(envd.url + STAT, content=body, headers={"content-type": "application/proto"})
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_argument"
    _still_serving(envd)


@pytest.mark.parametrize(
    ("route", "body"), [(STAT, b'{"path": "/"}'), ("/process.Process/List", b"{}")]
)
def test_header_value_that_is_not_utf8_is_served(
    envd: EnvdProcess, route: str, body: bytes
) -> None:
    # HTTP allows any byte in a header value (obs-text), and the reference passes them on.
    headers = [(b"content-type", b"application/json"), (b"x-note", "caf\xe9".encode("latin-1"))]
    r = httpx.post(envd.url + route, content=body, headers=headers)
    assert r.status_code == 200, r.text
    _still_serving(envd)
