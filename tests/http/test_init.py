"""POST /init over the wire: body validation, token rules, env replacement, replay protection
and the clock policy. Every test that changes state uses a daemon of its own."""

from __future__ import annotations

import pwd
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import pytest

from envd.http.body import MAX_MESSAGE_BYTES
from tests.http.raw_http import post_chunked_until_answered

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.envd_process import EnvdProcess

MIB = 1 << 20
TOO_LARGE = f"request body is larger than {MAX_MESSAGE_BYTES} bytes"
UNAUTHORIZED = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)


@pytest.fixture
def client(envd_factory: Callable[..., EnvdProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=envd_factory().url, timeout=30) as c:
        yield c


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


BAD_BODIES = [
    b"{",
    b"   ",
    b"[]",
    b"5",
    b'"text"',
    b'{"envVars": 1}',
    b'{"envVars": {"A": 1}}',
    b'{"envVars": ["A"]}',
    b'{"accessToken": ""}',
    b'{"accessToken": 42}',
    b'{"accessToken": "a\\u0062c"}',
    b'{"accessToken": "a\\"b"}',
    b'{"defaultUser": 1}',
    b'{"defaultWorkdir": true}',
    b'{"timestamp": "yesterday"}',
    b'{"timestamp": "2026-13-01T00:00:00Z"}',
    b'{"timestamp": "2026-01-01T00:00:00"}',
    b'{"timestamp": 1700000000}',
    b'{"hyperloopIP": 1}',
    b'{"volumeMounts": {}}',
    b'{"unknown": NaN}',
    b'{"a": 1} {"b": 2}',
    b"\xff\xfe",
    b"[" * 100_000 + b"]" * 100_000,
]


def _post_on(sock: socket.socket, path: bytes, body: bytes) -> tuple[bytes, bytes]:
    """POST on an open keep-alive connection; returns (status line, body)."""
    sock.sendall(
        b"POST %s HTTP/1.1\r\nHost: envd\r\nContent-Length: %d\r\n\r\n" % (path, len(body))
    )
    sock.sendall(body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(
        dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:]).get(
            b"content-length", b"0"
        )
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return head.split(b"\r\n")[0], rest


def test_bad_bodies_are_400_with_an_empty_body_and_change_nothing(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory()
    # One connection for all of them: none may cost the client its keep-alive connection.
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        sock.settimeout(30)
        for body in BAD_BODIES:
            assert _post_on(sock, b"/init", body) == (b"HTTP/1.1 400 Bad Request", b""), body[:40]
    # Still open to anyone: no token was set by any of them, and no env var arrived.
    assert httpx.get(daemon.url + "/envs").json() == {"E2B_SANDBOX": "false"}


def test_body_announced_over_the_cap_is_413_at_once(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory()
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        # Only the head is sent: the answer must not wait for the gigabyte it announces.
        sock.sendall(b"POST /init HTTP/1.1\r\nHost: envd\r\nContent-Length: %d\r\n\r\n" % (1 << 30))
        sock.settimeout(10)
        answer = b""
        # The head and the body may arrive in separate segments: read until the body is whole.
        while len(answer.partition(b"\r\n\r\n")[2]) < len(TOO_LARGE):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {answer!r}"
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"content-type: text/plain; charset=utf-8" in head.lower()
    assert body.decode() == TOO_LARGE


def test_streamed_body_over_the_cap_is_413_and_memory_stays_bounded(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    daemon = envd_factory()
    rss_before = daemon.rss_bytes()
    body = b'{"envVars": {"A": "' + b"a" * (64 * MIB) + b'"}}'
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        status = post_chunked_until_answered(sock, b"/init", body)
    assert status.startswith(b"HTTP/1.1 413 ")
    assert daemon.rss_bytes() - rss_before < 16 * MIB
    assert httpx.get(daemon.url + "/envs").json() == {"E2B_SANDBOX": "false"}


def test_env_map_just_under_the_cap_is_applied(client: httpx.Client) -> None:
    env = {f"VAR_{i:05}": "v" * 1000 for i in range(4000)}  # about 4 MB of JSON
    assert client.post("/init", json={"envVars": env}).status_code == 204
    assert len(client.get("/envs").json()) == len(env) + 1


def test_empty_null_and_unknown_fields_are_accepted(client: httpx.Client) -> None:
    for body in [b"", b"null", b"{}", b'{"envVars": null, "accessToken": null, "x": [1]}']:
        r = client.post("/init", content=body)
        assert r.status_code == 204, body
        assert r.headers["cache-control"] == "no-store"
        assert "content-type" not in r.headers
        # We claim 0.6.4; the reference adds this header only from 0.6.12.
        assert "x-envd-version" not in r.headers
        assert r.content == b""


def test_first_init_sets_the_token_and_later_ones_must_repeat_it(client: httpx.Client) -> None:
    assert client.post("/init", json={"accessToken": "secret-1"}).status_code == 204
    r = client.get("/envs")
    assert r.status_code == 401
    assert r.json() == {"code": 401, "message": UNAUTHORIZED}
    assert client.get("/envs", headers={"X-Access-Token": "secret-1"}).status_code == 200

    r = client.post("/init", json={"envVars": {"A": "1"}})
    assert (r.status_code, r.text) == (401, "access token reset not authorized")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    r = client.post("/init", json={"accessToken": "secret-2"})
    assert (r.status_code, r.text) == (401, "access token validation failed")
    # A rejected /init changed nothing: the old token still works, no env var arrived.
    token = {"X-Access-Token": "secret-1"}
    assert client.get("/envs", headers=token).json() == {"E2B_SANDBOX": "false"}

    # Repeating the token is authorised (the header is not what /init checks).
    r = client.post("/init", json={"accessToken": "secret-1", "envVars": {"A": "1"}})
    assert r.status_code == 204
    assert client.get("/envs", headers=token).json() == {"A": "1", "E2B_SANDBOX": "false"}


def test_field_names_match_case_insensitively_like_go(client: httpx.Client) -> None:
    assert client.post("/init", json={"ENVVARS": {"K": "v"}}).status_code == 204
    assert client.get("/envs").json()["K"] == "v"


def test_env_vars_replace_the_user_set_and_internal_vars_are_protected(
    client: httpx.Client,
) -> None:
    first = {"A": "1", "B": "2", "E2B_SANDBOX": "hijacked"}
    assert client.post("/init", json={"envVars": first}).status_code == 204
    assert client.get("/envs").json() == {"A": "1", "B": "2", "E2B_SANDBOX": "false"}
    assert client.post("/init", json={"envVars": {"B": "3", "C": ""}}).status_code == 204
    assert client.get("/envs").json() == {"B": "3", "C": "", "E2B_SANDBOX": "false"}
    # Absent envVars leaves the set alone; an empty object clears it.
    assert client.post("/init", json={}).status_code == 204
    assert client.get("/envs").json() == {"B": "3", "C": "", "E2B_SANDBOX": "false"}
    assert client.post("/init", json={"envVars": {}}).status_code == 204
    assert client.get("/envs").json() == {"E2B_SANDBOX": "false"}


def test_older_timestamps_are_replays_and_change_nothing(client: httpx.Client) -> None:
    now = datetime.now(UTC)
    newest, older = _rfc3339(now), _rfc3339(now - timedelta(seconds=1))
    assert (
        client.post("/init", json={"timestamp": newest, "envVars": {"V": "new"}}).status_code == 204
    )
    r = client.post("/init", json={"timestamp": older, "envVars": {"V": "old"}, "accessToken": "t"})
    assert r.status_code == 204
    # Neither the env var nor the token was applied.
    assert client.get("/envs").json()["V"] == "new"
    # Equal timestamps are applied, and so are requests without one.
    assert (
        client.post("/init", json={"timestamp": newest, "envVars": {"V": "same"}}).status_code
        == 204
    )
    assert client.get("/envs").json()["V"] == "same"
    assert client.post("/init", json={"envVars": {"V": "none"}}).status_code == 204
    assert client.get("/envs").json()["V"] == "none"


def test_nanosecond_timestamps_are_compared_exactly(client: httpx.Client) -> None:
    base = _rfc3339(datetime.now(UTC)).replace("Z", "")[:19]
    later, earlier = base + ".000000002Z", base + ".000000001Z"
    assert client.post("/init", json={"timestamp": later, "envVars": {"V": "2"}}).status_code == 204
    assert (
        client.post("/init", json={"timestamp": earlier, "envVars": {"V": "1"}}).status_code == 204
    )
    assert client.get("/envs").json()["V"] == "2"


def test_isnotfc_never_moves_the_host_clock(client: httpx.Client) -> None:
    # Far enough ahead that the reference would set CLOCK_REALTIME (> 5 s), small enough to be
    # harmless on a shared machine should this test ever fail.
    offset_s = 60
    wall, mono = time.time(), time.monotonic()
    ahead = _rfc3339(datetime.now(UTC) + timedelta(seconds=offset_s))
    assert client.post("/init", json={"timestamp": ahead}).status_code == 204
    drift = (time.time() - wall) - (time.monotonic() - mono)
    assert abs(drift) < offset_s / 2


@pytest.mark.root
def test_default_user_and_workdir_are_set_by_non_empty_values(
    client: httpx.Client, workdir: Path
) -> None:
    body = {"defaultUser": "user", "defaultWorkdir": str(workdir)}
    assert client.post("/init", json=body).status_code == 204
    # Empty strings are ignored, not applied.
    assert client.post("/init", json={"defaultUser": "", "defaultWorkdir": ""}).status_code == 204

    # No path: /files falls back to the default workdir (a directory, hence 400).
    r = client.get("/files")
    assert (r.status_code, r.json()["message"]) == (400, f"path '{workdir}' is a directory")
    # No username: the upload is made as the default user.
    target = workdir / "owned.txt"
    r = client.post(
        "/files",
        params={"path": str(target)},
        content=b"x",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200
    assert target.stat().st_uid == pwd.getpwnam("user").pw_uid
