"""POST /files/compose over the wire: ordered concatenation, source deletion, validation,
ownership, and keeping the destination and sources when it fails."""

from __future__ import annotations

import json
import os
import pwd
import socket
from typing import TYPE_CHECKING

import pytest

from envd.http.body import MAX_MESSAGE_BYTES
from tests.http.raw_http import post_chunked_until_answered
from tests.http.small_tmpfs import small_tmpfs

if TYPE_CHECKING:
    from pathlib import Path

    import httpx

    from tests.envd_process import EnvdProcess

MIB = 1 << 20


def _compose(
    http: httpx.Client, sources: list[str], destination: str, **extra: str
) -> httpx.Response:
    return http.post(
        "/files/compose", json={"source_paths": sources, "destination": destination, **extra}
    )


def test_concatenates_in_order_and_deletes_sources(http: httpx.Client, workdir: Path) -> None:
    parts = [workdir / f"part{i}" for i in range(3)]
    for i, part in enumerate(parts):
        part.write_bytes(b"%d" % i * (1000 + i))
    destination = workdir / "out" / "joined.bin"
    r = _compose(http, [str(p) for p in reversed(parts)], str(destination))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"path": str(destination), "name": "joined.bin", "type": "file"}
    assert destination.read_bytes() == b"2" * 1002 + b"1" * 1001 + b"0" * 1000
    assert not any(p.exists() for p in parts)
    assert [p.name for p in workdir.iterdir()] == ["out"]  # no temp file left


def test_duplicate_sources_and_replacing_the_destination(http: httpx.Client, workdir: Path) -> None:
    (workdir / "a").write_bytes(b"ab")
    (workdir / "dest").write_bytes(b"old")
    r = _compose(http, [str(workdir / "a"), str(workdir / "a")], str(workdir / "dest"))
    assert r.status_code == 200
    assert (workdir / "dest").read_bytes() == b"abab"


def test_large_unaligned_parts(http: httpx.Client, workdir: Path) -> None:
    payloads = [os.urandom(size) for size in (5 * 1024 * 1024 + 7, 4096, 1, 3 * 1024 * 1024)]
    for i, payload in enumerate(payloads):
        (workdir / f"p{i}").write_bytes(payload)
    r = _compose(http, [str(workdir / f"p{i}") for i in range(4)], str(workdir / "big"))
    assert r.status_code == 200
    assert (workdir / "big").read_bytes() == b"".join(payloads)


@pytest.mark.root
def test_parents_and_result_belong_to_the_user(http: httpx.Client, workdir: Path) -> None:
    (workdir / "s").write_bytes(b"x")
    destination = workdir / "new" / "dir" / "d"
    r = _compose(http, [str(workdir / "s")], str(destination), username="user")
    assert r.status_code == 200
    uid = pwd.getpwnam("user").pw_uid
    assert (workdir / "new").stat().st_uid == uid
    assert destination.stat().st_uid == uid


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{", 400, "invalid request body"),
        (b'{"source_paths": [], "destination": "/tmp/x"}', 400, "source_paths must not be empty"),
        (b'{"source_paths": ["/tmp/a"]}', 400, "destination is required"),
        (b'{"source_paths": "x", "destination": "/tmp/x"}', 400, "invalid request body"),
        (
            b'{"source_paths": ["/tmp/a"], "destination": "/tmp/x", "username": "ghost"}',
            401,
            "error looking up user 'ghost': user: unknown user ghost",
        ),
        (b'{"source_paths": ["~ghost/a"], "destination": "/tmp/x"}', 400, "error resolving path"),
        (b'{"source_paths": ' + b"[" * 100_000, 400, "invalid request body: nested too deeply"),
    ],
)
def test_bad_requests(http: httpx.Client, body: bytes, status: int, message: str) -> None:
    r = http.post("/files/compose", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert r.json()["message"].startswith(message)


def test_source_errors(http: httpx.Client, workdir: Path) -> None:
    (workdir / "s").write_bytes(b"x")
    same = _compose(http, [str(workdir / "s")], str(workdir / "s"))
    assert same.status_code == 400
    assert (
        same.json()["message"] == f'source path "{workdir / "s"}" cannot be the same as destination'
    )
    missing = _compose(http, [str(workdir / "s"), "nope/missing"], str(workdir / "d"))
    assert missing.status_code == 404
    assert missing.json()["message"] == "source file not found: nope/missing"
    directory = _compose(http, [str(workdir)], str(workdir / "d"))
    assert directory.status_code == 400
    assert directory.json()["message"] == f"source path is not a regular file: {workdir}"
    assert (workdir / "s").read_bytes() == b"x"
    assert not (workdir / "d").exists()


@pytest.mark.root
def test_full_disk_is_507_and_keeps_everything(http: httpx.Client, workdir: Path) -> None:
    with small_tmpfs(workdir / "small") as disk:
        _compose_on_full_disk(http, disk)


def _compose_on_full_disk(http: httpx.Client, small_tmpfs: Path) -> None:
    first, second = small_tmpfs / "a", small_tmpfs / "b"
    first.write_bytes(os.urandom(400 * 1024))
    second.write_bytes(os.urandom(400 * 1024))
    destination = small_tmpfs / "dest"
    destination.write_bytes(b"old destination")
    r = _compose(http, [str(first), str(second)], str(destination))
    assert r.status_code == 507
    assert r.json()["message"] == "not enough disk space available"
    assert destination.read_bytes() == b"old destination"
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["a", "b", "dest"]
    assert first.stat().st_size == second.stat().st_size == 400 * 1024


def test_body_over_the_cap_is_413_before_it_is_read(envd: EnvdProcess) -> None:
    with socket.create_connection(("127.0.0.1", envd.port)) as sock:
        # Only the head is sent: the answer must not wait for the gigabyte it announces.
        sock.sendall(
            b"POST /files/compose HTTP/1.1\r\nHost: envd\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (1 << 30)
        )
        sock.settimeout(10)
        answer = b""
        # The head and the body may arrive in separate segments: read until the body is whole
        # (the JSON error ends with a newline).
        while not answer.partition(b"\r\n\r\n")[2].endswith(b"\n"):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {answer!r}"
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body) == {
        "code": 413,
        "message": f"request body is larger than {MAX_MESSAGE_BYTES} bytes",
    }


def test_streamed_body_over_the_cap_is_413_and_memory_stays_bounded(
    envd: EnvdProcess, workdir: Path
) -> None:
    rss_before = envd.rss_bytes()
    paths = json.dumps([str(workdir / f"part-{i:07}") for i in range(1_000_000)]).encode()
    body = b'{"destination": "/tmp/x", "source_paths": ' + paths + b"}"
    assert len(body) > 32 * MIB
    with socket.create_connection(("127.0.0.1", envd.port)) as sock:
        status = post_chunked_until_answered(sock, b"/files/compose", body)
    assert status.startswith(b"HTTP/1.1 413 ")
    assert envd.rss_bytes() - rss_before < 16 * MIB
