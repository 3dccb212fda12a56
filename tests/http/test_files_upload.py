"""POST /files over the wire: raw and multipart bodies, gzip, metadata xattrs, ownership,
overwrites in place, concurrency and bad input."""

from __future__ import annotations

import gzip
import os
import pwd
import shutil
import stat
import threading
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    import httpx

OCTET = {"Content-Type": "application/octet-stream"}


def _raw(http: httpx.Client, path: str, body: bytes, **headers: str) -> httpx.Response:
    return http.post("/files", params={"path": path}, content=body, headers={**OCTET, **headers})


def _multipart(
    http: httpx.Client, parts: list[tuple[str, str, bytes]], **params: str
) -> httpx.Response:
    """parts: (form name, filename, content)."""
    files = [(name, (filename, content)) for name, filename, content in parts]
    return http.post("/files", params=params, files=files)


def test_raw_upload_creates_parents_and_answers_entries(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "a" / "b" / "file.bin"
    r = _raw(http, str(target), b"payload")
    assert r.status_code == 200
    assert r.json() == [{"path": str(target), "name": "file.bin", "type": "file"}]
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert target.read_bytes() == b"payload"


def test_query_is_percent_and_plus_decoded(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "a b é.txt"
    encoded = quote(str(target), safe="").replace("%20", "+")
    r = http.post(f"/files?path={encoded}", content=b"payload", headers=OCTET)
    assert r.status_code == 200
    assert r.json() == [{"path": str(target), "name": "a b é.txt", "type": "file"}]
    assert target.read_bytes() == b"payload"


def test_raw_upload_requires_path(http: httpx.Client) -> None:
    r = http.post("/files", content=b"x", headers=OCTET)
    assert r.status_code == 400
    assert r.json()["message"] == "path query parameter is required for raw body upload"


def test_overwrite_is_in_place(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "keep.txt"
    target.write_bytes(b"old content that is longer")
    target.chmod(0o600)
    inode = target.stat().st_ino
    assert _raw(http, str(target), b"new").status_code == 200
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino == inode
    assert target.stat().st_mode & 0o777 == 0o600


def test_gzip_raw_upload(http: httpx.Client, workdir: Path) -> None:
    payload = os.urandom(100_000) * 3
    body = gzip.compress(payload)
    r = _raw(http, str(workdir / "g.bin"), body, **{"Content-Encoding": "GZIP"})
    assert r.status_code == 200
    assert (workdir / "g.bin").read_bytes() == payload


def test_gzip_multipart_upload(http: httpx.Client, workdir: Path) -> None:
    import httpx as client_module

    request = client_module.Request(
        "POST", "http://x/files", files={"file": (str(workdir / "m.txt"), b"zipped part")}
    )
    body = gzip.compress(request.read())
    r = http.post(
        "/files",
        content=body,
        headers={"Content-Type": request.headers["content-type"], "Content-Encoding": "gzip"},
    )
    assert r.status_code == 200
    assert (workdir / "m.txt").read_bytes() == b"zipped part"


@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", b"not gzip at all"), ("gzip", gzip.compress(b"abc" * 1000)[:-20]), ("br", b"x")],
)
def test_bad_content_encoding_is_400_and_leaves_nothing(
    http: httpx.Client, workdir: Path, encoding: str, body: bytes
) -> None:
    target = workdir / "bad.bin"
    r = _raw(http, str(target), body, **{"Content-Encoding": encoding})
    assert r.status_code == 400
    assert r.json()["message"].startswith("error decompressing request body")
    assert not target.exists()


def test_multipart_filenames_are_paths(http: httpx.Client, workdir: Path) -> None:
    first, second = workdir / "x" / "one.txt", workdir / "y" / "two.txt"
    r = _multipart(
        http,
        [("file", str(first), b"1"), ("other", "ignored", b"?"), ("file", str(second), b"22")],
    )
    assert r.status_code == 200
    assert [e["path"] for e in r.json()] == [str(first), str(second)]
    assert (first.read_bytes(), second.read_bytes()) == (b"1", b"22")


def test_multipart_relative_filename_resolves_under_home(http: httpx.Client) -> None:
    r = _multipart(http, [("file", "envd-upload-test/dir/rel.txt", b"r")], username="user")
    try:
        assert r.status_code == 200
        assert r.json()[0]["path"] == "/home/user/envd-upload-test/dir/rel.txt"
    finally:
        shutil.rmtree("/home/user/envd-upload-test", ignore_errors=True)


def test_multipart_with_path_param_and_zero_file_parts(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "p.txt"
    r = _multipart(http, [("file", "whatever", b"via param")], path=str(target))
    assert r.json()[0]["path"] == str(target)
    assert target.read_bytes() == b"via param"
    empty = _multipart(http, [("note", "n", b"not a file")])
    assert (empty.status_code, empty.json()) == (200, [])


def test_duplicate_paths_in_one_request(http: httpx.Client, workdir: Path) -> None:
    a, b = workdir / "a.txt", workdir / "b.txt"
    parts = [("file", str(a), b"first"), ("file", str(b), b"b")]
    parts += [("file", str(workdir / "c"), b"c"), ("file", str(a), b"second")]
    r = _multipart(http, parts)
    assert r.status_code == 400
    assert r.json()["message"] == (
        f"you cannot upload multiple files to the same path '{a}' in one upload request, "
        "only the first specified file was uploaded, also the following files were uploaded: "
        f"{b}, {workdir / 'c'}"
    )
    assert a.read_bytes() == b"first"
    single = _multipart(
        http, [("file", "1", b"one"), ("file", "2", b"two")], path=str(workdir / "d.txt")
    )
    assert single.status_code == 400
    assert (workdir / "d.txt").read_bytes() == b"one"


def test_missing_filename_is_400(http: httpx.Client) -> None:
    body = b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\nx\r\n--B--\r\n'
    r = http.post(
        "/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 400
    assert "filename not found" in r.json()["message"]


@pytest.mark.parametrize("content_type", ["application/json", None, "text/plain"])
def test_unsupported_content_type(http: httpx.Client, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    r = http.post("/files", params={"path": "/tmp/x"}, content=b"{}", headers=headers)
    assert r.status_code == 400
    assert r.json()["message"] == (
        f"unsupported content type: {content_type or ''}, "
        "expected multipart/form-data or application/octet-stream"
    )


def test_directory_target_is_400(http: httpx.Client, workdir: Path) -> None:
    r = _raw(http, str(workdir), b"x")
    assert r.status_code == 400
    assert r.json()["message"] == f"path is a directory: {workdir}"


def test_unreachable_parent_is_500_without_traceback(http: httpx.Client) -> None:
    r = _raw(http, "/proc/invalid/not-real", b"x")
    assert r.status_code == 500
    assert r.json()["message"].startswith("error ensuring directories")
    opened = _raw(http, "/proc/invalid-filename", b"x")
    assert opened.status_code == 500
    assert opened.json()["message"].startswith("error opening file")


@pytest.mark.parametrize(
    "query", ["path=%7Eroot/x", "path=/tmp/a%00b", "path=/tmp/" + "a" * 5000 + "/x"]
)
def test_bad_upload_paths_are_client_errors(http: httpx.Client, query: str) -> None:
    r = http.post(f"/files?{query}", content=b"x", headers=OCTET)
    assert r.status_code in (400, 404)


def test_metadata_is_stored_replaced_and_cleared(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "meta.txt"
    r = _raw(
        http,
        str(target),
        b"x",
        **{"X-Metadata-Owner": "alice", "x-metadata-Kind": "report", "X-Metadata-": "dropped"},
    )
    assert r.json()[0]["metadata"] == {"owner": "alice", "kind": "report"}
    assert os.getxattr(target, "user.e2b.owner") == b"alice"
    r = _raw(http, str(target), b"y", **{"X-Metadata-Kind": "memo"})
    assert r.json()[0]["metadata"] == {"kind": "memo"}
    assert "user.e2b.owner" not in os.listxattr(target)
    os.setxattr(target, "user.other", b"kept")
    r = _raw(http, str(target), b"z")
    assert "metadata" not in r.json()[0]
    assert os.listxattr(target) == ["user.other"]


def test_first_metadata_value_wins(http: httpx.Client, workdir: Path) -> None:
    headers = [("X-Metadata-K", "first"), ("x-metadata-k", "second"), *OCTET.items()]
    r = http.post("/files", params={"path": str(workdir / "m")}, content=b"x", headers=headers)
    assert r.json()[0]["metadata"] == {"k": "first"}


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Metadata-Key": "tab\there"},
        {"X-Metadata-" + "k" * 247: "v"},
        {f"X-Metadata-K{i}": "v" * 200 for i in range(20)},
    ],
)
def test_invalid_metadata_is_400(
    http: httpx.Client, workdir: Path, headers: dict[str, str]
) -> None:
    r = _raw(http, str(workdir / "bad-meta"), b"x", **headers)
    assert r.status_code == 400
    assert r.json()["message"].startswith("invalid metadata:")
    assert not (workdir / "bad-meta").exists()


@pytest.mark.root
def test_new_directories_and_file_belong_to_the_user(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "owned" / "deeper" / "f.txt"
    existing_dir_owner = workdir.stat().st_uid
    r = http.post(
        "/files",
        params={"path": str(target), "username": "user"},
        content=b"x",
        headers=OCTET,
    )
    assert r.status_code == 200
    user_uid = pwd.getpwnam("user").pw_uid
    for path in (workdir / "owned", workdir / "owned" / "deeper", target):
        assert path.stat().st_uid == user_uid
    assert (workdir / "owned").stat().st_mode & 0o777 == 0o755
    assert workdir.stat().st_uid == existing_dir_owner


def test_concurrent_uploads_into_one_new_directory(http: httpx.Client, workdir: Path) -> None:
    base = workdir / "new" / "nested" / "dir"
    statuses: list[int] = []

    def upload(index: int) -> None:
        import httpx as client_module

        with client_module.Client(base_url=http.base_url, timeout=30) as client:
            statuses.append(_raw(client, f"{base}/f{index}", b"%d" % index).status_code)

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 4
    assert sorted(p.name for p in base.iterdir()) == ["f0", "f1", "f2", "f3"]


def test_corrupt_gzip_leaves_an_existing_file_untouched(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "precious.txt"
    target.write_bytes(b"keep me")
    r = _raw(http, str(target), b"\x1f\x8bnot really gzip", **{"Content-Encoding": "gzip"})
    assert r.status_code == 400
    assert target.read_bytes() == b"keep me"


def test_extended_filename_wins(http: httpx.Client, workdir: Path) -> None:
    target = workdir / "ünï.txt"
    encoded = quote(str(target).encode())
    disposition = f"form-data; name=file; filename=ignored; filename*=UTF-8''{encoded}"
    body = f"--B\r\nContent-Disposition: {disposition}\r\n\r\nextended\r\n--B--\r\n".encode()
    r = http.post(
        "/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 200
    assert r.json()[0]["path"] == str(target)
    assert target.read_bytes() == b"extended"


def test_non_utf8_multipart_filename_is_kept_byte_exact(http: httpx.Client, workdir: Path) -> None:
    raw_name = str(workdir).encode() + b"/bad-\xff-name"
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="'
        + raw_name
        + b'"\r\n\r\nodd\r\n--B--\r\n'
    )
    r = http.post(
        "/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 200
    assert r.json()[0]["name"] == "bad-\ufffd-name"  # JSON can only say "not UTF-8"
    assert os.listdir(os.fsencode(workdir)) == [b"bad-\xff-name"]


def test_error_about_a_non_utf8_path_is_still_json(http: httpx.Client, workdir: Path) -> None:
    os.mkdir(os.fsencode(workdir) + b"/dir-\xfe")
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="'
        + str(workdir).encode()
        + b'/dir-\xfe"\r\n\r\nodd\r\n--B--\r\n'
    )
    r = http.post(
        "/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 400
    assert r.json()["message"] == f"path is a directory: {workdir}/dir-\ufffd"


def test_upload_to_a_fifo_waits_for_its_reader_without_blocking_the_daemon(
    http: httpx.Client, workdir: Path
) -> None:
    fifo = workdir / "pipe"
    os.mkfifo(fifo)
    answers: list[httpx.Response] = []
    upload = threading.Thread(target=lambda: answers.append(_raw(http, str(fifo), b"through")))
    upload.start()
    try:
        # The upload's open() waits for a reader; every other request goes on meanwhile.
        import httpx as client_module

        with client_module.Client(base_url=http.base_url, timeout=2) as other:
            for _ in range(3):
                assert other.get("/health").status_code == 204
    finally:
        with open(fifo, "rb") as reader:  # lets the upload through even if the check failed
            received = reader.read()
        upload.join()
    assert received == b"through"
    assert answers[0].status_code == 200
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_upload_through_a_symlink_writes_its_target(http: httpx.Client, workdir: Path) -> None:
    existing = workdir / "existing.txt"
    existing.write_bytes(b"old, longer content")
    inode = existing.stat().st_ino
    (workdir / "to-existing").symlink_to(existing)
    (workdir / "dangling").symlink_to(workdir / "created-through-link.txt")
    assert _raw(http, str(workdir / "to-existing"), b"new").status_code == 200
    assert _raw(http, str(workdir / "dangling"), b"made").status_code == 200
    assert existing.read_bytes() == b"new"
    assert existing.stat().st_ino == inode
    assert (workdir / "to-existing").is_symlink()
    assert (workdir / "created-through-link.txt").read_bytes() == b"made"
    assert (workdir / "dangling").is_symlink()
