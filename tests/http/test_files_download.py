"""GET /files over the wire: headers, Content-Type and Content-Disposition, gzip negotiation,
byte ranges, conditional requests and bad input."""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import zlib
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    import httpx


def _get(http: httpx.Client, path: str, **headers: str) -> httpx.Response:
    # httpx asks for gzip by default; these tests want the identity form unless they say so.
    return http.get(
        "/files", params={"path": path}, headers={"Accept-Encoding": "identity", **headers}
    )


def test_download_returns_content_and_headers(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "test.txt"
    target.write_text("hello world\n")
    r = _get(http, str(target))
    assert r.status_code == 200
    assert r.content == b"hello world\n"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-length"] == "12"
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-disposition"] == "inline; filename=test.txt"
    assert "Accept-Encoding" in r.headers.get_list("vary")
    modified = email.utils.parsedate_to_datetime(r.headers["last-modified"])
    assert int(modified.timestamp()) == int(target.stat().st_mtime)


def test_large_download_is_byte_exact(http: httpx.Client, workdir: Path) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 5)
    target = workdir / "big.bin"
    target.write_bytes(payload)
    r = _get(http, str(target))
    assert r.status_code == 200
    assert hashlib.sha256(r.content).digest() == hashlib.sha256(payload).digest()


def test_empty_file_is_200_with_zero_length(http: httpx.Client, workdir: Path) -> None:
    (workdir / "empty").write_bytes(b"")
    r = _get(http, str(workdir / "empty"))
    assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "0")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("test.txt", "inline; filename=test.txt"),
        ("my document.pdf", 'inline; filename="my document.pdf"'),
        ('file"name.txt', 'inline; filename="file\\"name.txt"'),
        ("back\\slash.txt", 'inline; filename="back\\\\slash.txt"'),
        ("文档.pdf", "inline; filename*=utf-8''%E6%96%87%E6%A1%A3.pdf"),
        (".hidden", "inline; filename=.hidden"),
    ],
)
def test_content_disposition(http: httpx.Client, workdir: Path, name: str, expected: str) -> None:
    (workdir / name).write_bytes(b"x")
    r = _get(http, str(workdir / name))
    assert r.status_code == 200
    assert r.headers["content-disposition"] == expected


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("data.json", b"{}", "application/json"),
        ("page.html", b"<p>", "text/html; charset=utf-8"),
        ("noext", b"\x00\x01\x02binary", "application/octet-stream"),
        ("notes", b"just text", "text/plain; charset=utf-8"),
        ("image", b"\x89PNG\r\n\x1a\n....", "image/png"),
    ],
)
def test_content_type_by_extension_or_sniffing(
    http: httpx.Client, workdir: Path, name: str, content: bytes, expected: str
) -> None:
    (workdir / name).write_bytes(content)
    assert _get(http, str(workdir / name)).headers["content-type"] == expected


def test_missing_file_is_404(http: httpx.Client, workdir: Path) -> None:
    missing = f"{workdir}/nope.txt"
    r = _get(http, missing)
    assert r.status_code == 404
    assert r.content == f'{{"code":404,"message":"path \'{missing}\' does not exist"}}\n'.encode()
    assert r.headers["content-type"] == "application/json; charset=utf-8"


def test_directory_is_400(http: httpx.Client, workdir: Path) -> None:
    r = _get(http, str(workdir))
    assert r.status_code == 400
    assert r.json() == {"code": 400, "message": f"path '{workdir}' is a directory"}


def test_no_path_means_home_which_is_a_directory(http: httpx.Client) -> None:
    r = http.get("/files")
    assert r.status_code == 400
    assert r.json()["message"] == "path '/root' is a directory"


def test_relative_path_resolves_under_the_users_home(http: httpx.Client) -> None:
    r = http.get("/files", params={"path": "definitely-missing.txt", "username": "user"})
    assert r.json()["message"] == "path '/home/user/definitely-missing.txt' does not exist"


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("path=%7Eroot/x", 400),  # ~other
        ("path=/tmp/a%00b", 400),  # NUL byte
        ("path=/" + "a" * 5000, 400),  # longer than PATH_MAX
        ("path=/tmp/%FF%FE-not-utf8", 404),
    ],
)
def test_bad_paths_are_client_errors(http: httpx.Client, query: str, status: int) -> None:
    r = http.get(f"/files?{query}")
    assert r.status_code == status
    assert r.json()["code"] == status


def test_unknown_user_is_401(http: httpx.Client, workdir: Path) -> None:
    r = http.get("/files", params={"path": str(workdir), "username": "nobody-here"})
    assert r.status_code == 401
    assert r.json()["message"] == (
        "error looking up user 'nobody-here': user: unknown user nobody-here"
    )


def test_non_integer_signature_expiration_is_plain_400(http: httpx.Client) -> None:
    r = http.get("/files", params={"path": "/etc/hostname", "signature_expiration": "soon"})
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("Invalid format for parameter signature_expiration")


def test_gzip_download(http: httpx.Client, workdir: Path) -> None:
    payload = b"compress me " * 100_000
    (workdir / "test.txt").write_bytes(payload)
    r = http.get(
        "/files",
        params={"path": str(workdir / "test.txt")},
        headers={"Accept-Encoding": "gzip"},
    )
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert "content-length" not in r.headers
    assert "last-modified" not in r.headers
    assert r.content == payload  # httpx decodes gzip


def test_gzip_body_is_really_gzip(http: httpx.Client, workdir: Path) -> None:
    (workdir / "a.bin").write_bytes(b"\x00" * 5000)
    params = {"path": str(workdir / "a.bin")}
    with http.stream("GET", "/files", params=params, headers={"Accept-Encoding": "gzip"}) as r:
        raw = b"".join(r.iter_raw())
    assert gzip.decompress(raw) == b"\x00" * 5000
    assert r.headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize(
    ("accept", "encoding"),
    [
        ("gzip", "gzip"),
        ("br", None),
        ("identity;q=1, gzip;q=0.5", None),
        ("gzip;q=0", None),
        ("*;q=0, gzip", "gzip"),
        ("*", None),
        ("", None),
    ],
)
def test_accept_encoding_negotiation(
    http: httpx.Client, workdir: Path, accept: str, encoding: str | None
) -> None:
    (workdir / "f.txt").write_text("x")
    r = _get(http, str(workdir / "f.txt"), **{"Accept-Encoding": accept})
    assert r.status_code == 200
    assert r.headers.get("content-encoding") == encoding


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            {"Accept-Encoding": "identity;q=0"},
            "error parsing Accept-Encoding: no acceptable encoding found, supported: [gzip]",
        ),
        (
            {"Accept-Encoding": "*;q=0"},
            "error parsing Accept-Encoding: no acceptable encoding found, supported: [gzip]",
        ),
        (
            {"Accept-Encoding": "gzip; q=1,*; q=0", "Range": "bytes=0-1"},
            "identity encoding not acceptable for Range or conditional request",
        ),
    ],
)
def test_not_acceptable(
    http: httpx.Client, workdir: Path, headers: dict[str, str], message: str
) -> None:
    (workdir / "f.txt").write_text("x")
    r = _get(http, str(workdir / "f.txt"), **headers)
    assert r.status_code == 406
    assert r.json() == {"code": 406, "message": message}


def test_single_range(http: httpx.Client, workdir: Path) -> None:
    (workdir / "r.txt").write_bytes(b"0123456789")
    r = _get(http, str(workdir / "r.txt"), Range="bytes=2-5")
    assert r.status_code == 206
    assert r.content == b"2345"
    assert r.headers["content-range"] == "bytes 2-5/10"
    assert r.headers["content-length"] == "4"
    suffix = _get(http, str(workdir / "r.txt"), Range="bytes=-3")
    assert (suffix.status_code, suffix.content) == (206, b"789")


def test_multiple_ranges_are_multipart(http: httpx.Client, workdir: Path) -> None:
    (workdir / "r.txt").write_bytes(b"0123456789")
    r = _get(http, str(workdir / "r.txt"), Range="bytes=0-1,8-")
    assert r.status_code == 206
    media, _, boundary = r.headers["content-type"].partition("; boundary=")
    assert media == "multipart/byteranges"
    assert int(r.headers["content-length"]) == len(r.content)
    parts = r.content.split(f"--{boundary}".encode())
    assert parts[0] == b""
    assert parts[-1] == b"--\r\n"
    assert (
        b"Content-Range: bytes 0-1/10\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n01\r\n"
        in parts[1]
    )
    assert parts[2].endswith(
        b"Content-Range: bytes 8-9/10\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n89\r\n"
    )


def test_unsatisfiable_range_is_416(http: httpx.Client, workdir: Path) -> None:
    (workdir / "r.txt").write_bytes(b"0123456789")
    r = _get(http, str(workdir / "r.txt"), Range="bytes=50-60")
    assert r.status_code == 416
    assert r.headers["content-range"] == "bytes */10"
    bad = _get(http, str(workdir / "r.txt"), Range="lines=1-2")
    assert bad.status_code == 416


def test_conditional_requests(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "c.txt"
    target.write_bytes(b"0123456789")
    mtime = int(target.stat().st_mtime)
    later = email.utils.formatdate(mtime + 60, usegmt=True)
    earlier = email.utils.formatdate(mtime - 60, usegmt=True)
    not_modified = _get(http, str(target), **{"If-Modified-Since": later})
    assert (not_modified.status_code, not_modified.content) == (304, b"")
    assert _get(http, str(target), **{"If-Modified-Since": earlier}).status_code == 200
    assert _get(http, str(target), **{"If-Unmodified-Since": earlier}).status_code == 412
    stale = _get(http, str(target), Range="bytes=0-1", **{"If-Range": earlier})
    assert (stale.status_code, stale.content) == (200, b"0123456789")
    current = email.utils.formatdate(mtime, usegmt=True)
    fresh = _get(http, str(target), Range="bytes=0-1", **{"If-Range": current})
    assert (fresh.status_code, fresh.content) == (206, b"01")


def test_fifo_is_refused_without_blocking(http: httpx.Client, workdir: Path) -> None:
    os.mkfifo(workdir / "pipe")
    r = _get(http, str(workdir / "pipe"))
    assert r.status_code == 400
    assert r.json()["message"] == f"path '{workdir / 'pipe'}' is not a regular file"


def test_head_answers_headers_without_a_body(http: httpx.Client, workdir: Path) -> None:
    (workdir / "h.txt").write_bytes(b"0123456789")
    r = http.head(
        "/files", params={"path": str(workdir / "h.txt")}, headers={"Accept-Encoding": "identity"}
    )
    assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "10")


@pytest.mark.parametrize(
    "path", ["/proc/self/status", "/proc/cpuinfo", "/sys/kernel/uevent_seqnum"]
)
def test_pseudo_files_are_served_whole(http: httpx.Client, path: str) -> None:
    r = _get(http, path)
    assert r.status_code == 200
    assert int(r.headers["content-length"]) == len(r.content) > 0
    assert r.content.endswith(b"\n")
    ranged = _get(http, path, Range="bytes=0-1")
    assert (ranged.status_code, len(ranged.content)) == (206, 2)


# The snapshot cap for pseudo files (envd.http.download.PSEUDO_FILE_MAX_BYTES).
PSEUDO_FILE_CAP = 16 * 1024 * 1024


def _gunzipped_length(http: httpx.Client, path: str, give_up_after: int) -> int:
    """Length of the decoded gzip body, reading no more than `give_up_after` decoded bytes."""
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total = 0
    params = {"path": path}
    with http.stream("GET", "/files", params=params, headers={"Accept-Encoding": "gzip"}) as r:
        assert r.status_code == 200
        for raw in r.iter_raw():
            total += len(decoder.decompress(raw))
            if total > give_up_after:
                break
    return total


def test_pseudo_file_cap_applies_to_gzip_too(http: httpx.Client) -> None:
    # envd's own pagemap claims size 0 but reads on for hundreds of GiB.
    path = "/proc/self/pagemap"
    identity = _get(http, path)
    assert identity.status_code == 200
    assert len(identity.content) == int(identity.headers["content-length"]) == PSEUDO_FILE_CAP
    assert _gunzipped_length(http, path, give_up_after=2 * PSEUDO_FILE_CAP) == PSEUDO_FILE_CAP


@pytest.mark.parametrize("path", ["/proc/1/mem", "/proc/self/mem"])
@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_unreadable_pseudo_file_is_a_json_error(
    http: httpx.Client, path: str, encoding: str
) -> None:
    # Opening another process's memory is EACCES without ptrace rights; reading envd's own
    # from offset 0 is EIO. Both are the reference's 500 for open errors, in either encoding.
    r = http.get("/files", params={"path": path}, headers={"Accept-Encoding": encoding})
    assert r.status_code == 500
    assert r.json()["message"].startswith(("error opening file", "error reading file"))


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_devices_are_not_regular_files(http: httpx.Client, path: str) -> None:
    r = _get(http, path)
    assert r.status_code == 400
    assert r.json()["message"] == f"path '{path}' is not a regular file"
