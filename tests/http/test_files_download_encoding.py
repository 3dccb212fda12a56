"""GET /files over the wire: which encoding a file goes out in when the client accepts gzip.

Files of 64 KiB and more are gzipped only if they compress (judged from samples) or the client
rejects identity; random data goes out as identity with the identity path's headers. The gzip
body streams from a worker thread; a client that goes away stops it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import zlib
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
import pytest

from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.envd_process import EnvdProcess

MIB = 1024 * 1024
SDK_ACCEPT = "gzip, deflate"  # what the Python SDK's HTTP client sends on every read


def _text(size: int) -> bytes:
    """Compressible but not trivially so: hex digits of random bytes (gzip: about 0.55)."""
    return os.urandom(size // 2 + 1).hex().encode()[:size]


@pytest.fixture
def random_file(workdir: Path) -> Path:
    path = workdir / "random.bin"
    path.write_bytes(os.urandom(2 * MIB))
    return path


@pytest.fixture
def text_file(workdir: Path) -> Path:
    path = workdir / "text.txt"
    path.write_bytes(_text(2 * MIB))
    return path


def _raw_get(http: httpx.Client, path: Path, **headers: str) -> tuple[httpx.Response, bytes]:
    """The response and its body as sent, not decoded."""
    with http.stream("GET", "/files", params={"path": str(path)}, headers=headers) as r:
        return r, b"".join(r.iter_raw())


def _gunzip(body: bytes) -> bytes:
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = decoder.decompress(body)
    assert decoder.eof
    assert decoder.unused_data == b""  # one gzip member, as every client can read
    return data


def test_random_data_goes_out_as_identity_though_gzip_is_accepted(
    http: httpx.Client, random_file: Path
) -> None:
    r, body = _raw_get(http, random_file, **{"Accept-Encoding": SDK_ACCEPT})
    assert r.status_code == 200
    assert "content-encoding" not in r.headers
    assert body == random_file.read_bytes()
    # The identity path's headers, as for a client that asked for identity.
    assert r.headers["content-length"] == str(2 * MIB)
    assert r.headers["accept-ranges"] == "bytes"
    assert "last-modified" in r.headers
    assert "Accept-Encoding" in r.headers.get_list("vary")


def test_text_is_gzipped_and_decodes_to_the_exact_bytes(
    http: httpx.Client, text_file: Path
) -> None:
    r, body = _raw_get(http, text_file, **{"Accept-Encoding": SDK_ACCEPT})
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert "content-length" not in r.headers
    assert _gunzip(body) == text_file.read_bytes()
    assert len(body) < 0.6 * 2 * MIB


def test_small_files_are_gzipped_whatever_they_hold(http: httpx.Client, workdir: Path) -> None:
    # Below 64 KiB the reference's behaviour costs nothing to keep.
    payload = os.urandom(60 * 1024)
    (workdir / "small.bin").write_bytes(payload)
    r, body = _raw_get(http, workdir / "small.bin", **{"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    assert _gunzip(body) == payload


@pytest.mark.parametrize("size", [0, 1, 64 * 1024, 64 * 1024 + 1])
def test_gzip_bodies_around_the_inline_limit_decode_exactly(
    http: httpx.Client, workdir: Path, size: int
) -> None:
    # Up to 64 KiB the body is compressed on the event loop, above it in worker threads.
    payload = _text(size)
    (workdir / "edge.txt").write_bytes(payload)
    r, body = _raw_get(http, workdir / "edge.txt", **{"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    assert _gunzip(body) == payload


def test_mostly_random_file_with_text_at_one_end_is_judged_by_its_samples(
    http: httpx.Client, workdir: Path
) -> None:
    # Sampling looks all over the file, not only at its head.
    payload = _text(256 * 1024) + os.urandom(4 * MIB)
    (workdir / "mixed.bin").write_bytes(payload)
    r, body = _raw_get(http, workdir / "mixed.bin", **{"Accept-Encoding": "gzip"})
    assert "content-encoding" not in r.headers
    assert body == payload


@pytest.mark.parametrize(
    ("accept", "random_encoding", "text_encoding"),
    [
        ("gzip", None, "gzip"),
        ("gzip;q=1, identity;q=0.5", None, "gzip"),  # identity is still acceptable
        ("identity;q=1, gzip;q=0.5", None, None),  # the client prefers identity
        ("gzip;q=0", None, None),
        ("deflate, br", None, None),  # nothing envd produces but identity
        ("*", None, None),  # as the reference: identity is acceptable, so identity
        ("identity;q=0, gzip", "gzip", "gzip"),  # RFC 9110: identity rejected
        ("gzip;q=0.1, *;q=0", "gzip", "gzip"),  # identity rejected through the wildcard
        ("*;q=0, identity;q=0.2, gzip", None, "gzip"),  # ... unless named with q > 0
        ("GZIP; Q=0.5", None, "gzip"),  # names and parameters are case-insensitive
    ],
)
def test_quality_values(
    http: httpx.Client,
    random_file: Path,
    text_file: Path,
    accept: str,
    random_encoding: str | None,
    text_encoding: str | None,
) -> None:
    for path, expected in ((random_file, random_encoding), (text_file, text_encoding)):
        r, body = _raw_get(http, path, **{"Accept-Encoding": accept})
        assert r.status_code == 200
        assert r.headers.get("content-encoding") == expected, (path.name, accept)
        decoded = _gunzip(body) if expected == "gzip" else body
        assert decoded == path.read_bytes()


def test_range_is_unaffected_by_gzip_being_accepted(http: httpx.Client, text_file: Path) -> None:
    r, body = _raw_get(http, text_file, **{"Accept-Encoding": SDK_ACCEPT, "Range": "bytes=10-19"})
    assert r.status_code == 206
    assert "content-encoding" not in r.headers
    assert body == text_file.read_bytes()[10:20]
    assert r.headers["content-range"] == f"bytes 10-19/{2 * MIB}"


def test_head_announces_the_encoding_get_would_use(
    http: httpx.Client, random_file: Path, text_file: Path
) -> None:
    headers = {"Accept-Encoding": SDK_ACCEPT}
    random_head = http.head("/files", params={"path": str(random_file)}, headers=headers)
    assert "content-encoding" not in random_head.headers
    assert random_head.headers["content-length"] == str(2 * MIB)
    text_head = http.head("/files", params={"path": str(text_file)}, headers=headers)
    assert text_head.headers["content-encoding"] == "gzip"


def test_large_files_both_ways(http: httpx.Client, workdir: Path) -> None:
    # Many chunks through the compressing thread, and a body that ends off a chunk boundary.
    text = _text(48 * MIB + 12345)
    (workdir / "big.txt").write_bytes(text)
    r, body = _raw_get(http, workdir / "big.txt", **{"Accept-Encoding": SDK_ACCEPT})
    assert r.headers["content-encoding"] == "gzip"
    assert hashlib.sha256(_gunzip(body)).digest() == hashlib.sha256(text).digest()
    noise = os.urandom(48 * MIB + 12345)
    (workdir / "big.bin").write_bytes(noise)
    r, body = _raw_get(http, workdir / "big.bin", **{"Accept-Encoding": SDK_ACCEPT})
    assert "content-encoding" not in r.headers
    assert hashlib.sha256(body).digest() == hashlib.sha256(noise).digest()


def test_client_leaving_mid_compression_stops_the_work(envd: EnvdProcess, workdir: Path) -> None:
    # 1 TiB of holes (no disk used): compressing it all would hold the file open for minutes.
    # The client reads the head and hangs up; envd must stop reading and let the file go.
    path = workdir / "endless.bin"
    with open(path, "wb") as f:
        f.truncate(1 << 40)
    sock = socket.create_connection(("127.0.0.1", envd.port))
    sock.sendall(
        f"GET /files?path={quote(str(path))} HTTP/1.1\r\nHost: x\r\n"
        "Accept-Encoding: gzip\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(64 * 1024)
    assert b"content-encoding: gzip" in head.lower()
    assert envd.holds_open(path)  # the transfer is under way
    sock.close()
    wait_until(lambda: not envd.holds_open(path), 60, "envd to stop compressing and close the file")
    # And it still serves.
    assert httpx.get(f"{envd.url}/health").is_success
