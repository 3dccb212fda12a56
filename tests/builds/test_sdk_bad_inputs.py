"""Bad inputs to the build API, sent as plain HTTP (httpx) from inside `uplink` to the session's
serve: an unknown step type, an upload with `../` in it, an upload without a valid signature,
one over the size cap, an image that does not exist. Each gets a clear answer (never a 500) and
leaves nothing behind in serve's state directory (only its database may change)."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from sandboxd.builds.upload_urls import VALID_S, signed_path
from sandboxd.daemon.machinery import server_secret
from sandboxd.lifecycle.tokens import Tokens
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.network.served import UplinkSandboxd

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and sandboxes"),
    pytest.mark.timeout(600),
]

# A hash as the SDKs send it (sha256 hex of the step and its files).
FILES_HASH_LEN = 64
# The store's files change with every request; everything else must come back as it was.
DATABASE_SUFFIXES = (".db", ".db-wal", ".db-shm", ".db-journal")


def state_listing(server: UplinkSandboxd) -> set[str]:
    """Every file (anything but a directory: an empty directory made on first use is not a
    leftover) under serve's state directory, but its database and the sandboxes'."""
    found = set()
    for path in server.state_dir.rglob("*"):
        relative = path.relative_to(server.state_dir)
        if relative.parts[0] == "sandboxes" or path.name.endswith(DATABASE_SUFFIXES):
            continue
        if not path.is_dir() or path.is_symlink():
            found.add(str(relative))
    return found


def request_build(server: UplinkSandboxd) -> tuple[str, str]:
    """POST /v3/templates: (templateID, buildID) of a fresh template name."""
    made = server.api("POST", "/v3/templates", json={"name": f"bad-{uuid.uuid4().hex[:8]}"})
    assert made.status_code == 202, made.text
    return made.json()["templateID"], made.json()["buildID"]


def delete(server: UplinkSandboxd, template: str) -> None:
    deleted = server.api("DELETE", f"/templates/{template}")
    assert deleted.status_code in (204, 404), deleted.text


def upload_link(server: UplinkSandboxd, template: str) -> str:
    files_hash = uuid.uuid4().hex * 2
    assert len(files_hash) == FILES_HASH_LEN
    link = server.api("GET", f"/templates/{template}/files/{files_hash}")
    assert link.status_code == 201, link.text
    assert link.json()["present"] is False
    url: str = link.json()["url"]
    return url


def put(server: UplinkSandboxd, url: str, body: bytes, **kwargs: Any) -> httpx.Response:
    """PUT to an upload URL from inside `uplink`, by a client without the API key (as the SDKs
    upload)."""
    return server.net.uplink.call(lambda: httpx.put(url, content=body, timeout=60, **kwargs))


def tar_of(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def build_to_end(
    server: UplinkSandboxd, template: str, build: str, body: dict[str, Any]
) -> dict[str, Any]:
    """Start the build with `body` and wait for its final status."""
    started = server.api("POST", f"/v2/templates/{template}/builds/{build}", json=body)
    assert started.status_code == 202, started.text
    path = f"/templates/{template}/builds/{build}/status?logsOffset=0"

    def ended() -> dict[str, Any] | None:
        status = server.api("GET", path)
        assert status.status_code == 200, status.text
        answer: dict[str, Any] = status.json()
        return answer if answer["status"] not in ("waiting", "building") else None

    return wait_until(ended, 600, "the build to end")


def assert_clear(answer: httpx.Response, status: int, *words: str) -> None:
    """The status, and a JSON error whose message names what was wrong."""
    assert answer.status_code == status, answer.text
    message = answer.json()["message"]
    for word in words:
        assert word.lower() in message.lower(), message


@pytest.fixture
def unchanged(build_server: UplinkSandboxd) -> Any:
    """The test's requests leave the state directory as they found it (templates they made
    are deleted by the test first)."""
    before = state_listing(build_server)
    yield
    assert state_listing(build_server) - before == set()


def test_unknown_step_type(build_server: UplinkSandboxd, images: dict[str, str],
                           unchanged: None) -> None:  # fmt: skip
    template, build = request_build(build_server)
    try:
        body = {"fromImage": images["busybox"], "force": False,
                "steps": [{"type": "FROBNICATE", "args": ["x"], "force": False}]}  # fmt: skip
        answer = build_server.api("POST", f"/v2/templates/{template}/builds/{build}", json=body)
        assert_clear(answer, 400, "FROBNICATE")
    finally:
        delete(build_server, template)


def test_upload_leaving_its_directory(build_server: UplinkSandboxd, unchanged: None,
                                      tmp_path: Path) -> None:  # fmt: skip
    template, _ = request_build(build_server)
    try:
        url = upload_link(build_server, template)
        for name in ("../escaped", "a/../../escaped"):
            answer = put(build_server, url, tar_of({"fine": b"ok", name: b"out"}))
            assert_clear(answer, 400, name)
        files_hash = urlsplit(url).path.rstrip("/").split("/")[-1]
        again = build_server.api("GET", f"/templates/{template}/files/{files_hash}")
        if again.status_code == 201:
            assert again.json()["present"] is False
        assert not list(build_server.state_dir.parent.rglob("escaped"))
    finally:
        delete(build_server, template)


def test_upload_without_a_valid_signature(build_server: UplinkSandboxd, unchanged: None) -> None:
    template, _ = request_build(build_server)
    try:
        url = upload_link(build_server, template)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        assert query, f"the upload URL carries no authorisation: {url}"
        body = tar_of({"f": b"x"})
        unsigned = urlunsplit(parts._replace(query=""))
        # Without the signature (even with the API key: the URL must carry its own), with one
        # altered, with an expiry moved (its signature no longer matches).
        assert put(build_server, unsigned, body).status_code in (401, 403)
        with_key = put(build_server, unsigned, body, headers=build_server.headers)
        assert with_key.status_code in (401, 403), with_key.text
        for key, value in query.items():
            altered = {**query, key: value[:-1] + ("0" if value[-1:] != "0" else "1")}
            answer = put(build_server, urlunsplit(parts._replace(query=urlencode(altered))), body)
            assert answer.status_code in (401, 403), (key, answer.text)
            assert answer.json()["message"]
        # Signed with serve's own key as the URLs it hands out: valid an hour ago, expired now;
        # the same made now is taken (so the expired one is refused for its age alone).
        uploads_key = Tokens(server_secret(build_server.state_dir)).uploads_key()
        files_hash = parts.path.rstrip("/").split("/")[-1]

        def signed(now: float) -> str:
            return urlunsplit(parts._replace(path="", query="")) + signed_path(
                uploads_key, template, files_hash, now
            )

        expired = put(build_server, signed(time.time() - 2 * VALID_S), body)
        assert_clear(expired, 403, "expired")
        assert put(build_server, signed(time.time()), body).status_code == 200
    finally:
        delete(build_server, template)


def test_upload_over_the_cap(build_server: UplinkSandboxd, unchanged: None) -> None:
    """A Content-Length of a terabyte, and no body: refused from the headers (413), before any
    byte is read or stored."""
    template, _ = request_build(build_server)
    try:
        url = urlsplit(upload_link(build_server, template))
        target = url.path + (f"?{url.query}" if url.query else "")
        head = (f"PUT {target} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                f"Content-Length: {1 << 40}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip

        def send() -> bytes:
            with socket.create_connection((url.hostname, url.port), timeout=60) as conn:
                conn.sendall(head)
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
                return answer

        answer = build_server.net.uplink.call(send)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:500]
    finally:
        delete(build_server, template)


def test_image_that_does_not_exist(build_server: UplinkSandboxd, images: dict[str, str],
                                   unchanged: None) -> None:  # fmt: skip
    registry = images["debian"].split("/")[0]
    template, build = request_build(build_server)
    try:
        body = {"fromImage": f"{registry}/builds/nosuchimage:latest", "force": False,
                "steps": [{"type": "RUN", "args": ["true"], "force": False}]}  # fmt: skip
        final = build_to_end(build_server, template, build, body)
        assert final["status"] == "error"
        assert final["reason"]["step"] == "base"
        assert "nosuchimage" in final["reason"]["message"]
    finally:
        delete(build_server, template)


def test_a_failing_step_leaves_no_layer(
    build_server: UplinkSandboxd, images: dict[str, str]
) -> None:
    """The second of two identical failing builds (the first pulled the image and made what a
    build of it keeps) adds nothing: the failed step's layer is not kept, whole or in part."""
    body = {"fromImage": images["busybox"], "force": True,
            "steps": [{"type": "RUN", "args": ["echo partial > /partial && exit 3", "root"],
                       "force": True}]}  # fmt: skip
    templates = []
    try:
        listings = []
        for _ in range(2):
            template, build = request_build(build_server)
            templates.append(template)
            final = build_to_end(build_server, template, build, body)
            assert final["status"] == "error", final
            assert final["reason"]["step"] == "1", final["reason"]
            listings.append(state_listing(build_server))
        assert listings[1] - listings[0] == set()
    finally:
        for template in templates:
            delete(build_server, template)
