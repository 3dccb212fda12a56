"""Deeply nested JSON is refused before protobuf-py parses it (its native reader recursed on
the C stack: ~15,000 levels, a 30 KB body, killed the daemon with SIGSEGV)."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

import httpx
import pytest

from envd.json_depth import JSON_DEPTH_LIMIT

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.envd_process import EnvdProcess

# Far past the depth that crashed (about 12,000-15,000 with an 8 MiB stack).
CRASH_DEPTH = 50_000
UNARY = {"content-type": "application/json"}
STREAM = {"content-type": "application/connect+json"}
LEGACY_SDK = {**UNARY, "user-agent": "connect-python"}


def nested(depth: int, field: str = "path") -> bytes:
    """A request object whose `field` holds arrays nested so that the body is `depth` deep."""
    inner = depth - 1
    return b'{"%s":%s%s}' % (field.encode(), b"[" * inner, b"]" * inner)


def envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


def end_stream_error(body: bytes) -> dict[str, str]:
    """The error of a Connect stream's end-of-stream frame (the last frame)."""
    offset = 0
    while offset < len(body):
        flags, size = struct.unpack(">BI", body[offset : offset + 5])
        payload = body[offset + 5 : offset + 5 + size]
        offset += 5 + size
        if flags & 0x02:
            error: dict[str, str] = json.loads(payload)["error"]
            return error
    raise AssertionError(f"no end-of-stream frame in {body!r}")


def assert_alive(daemon: EnvdProcess) -> None:
    assert daemon.proc.poll() is None, f"envd died: exit {daemon.proc.returncode}"
    assert httpx.get(daemon.url + "/health", timeout=5).status_code == 204


def _unary(route: str, headers: dict[str, str]) -> Callable[[str, bytes], dict[str, str]]:
    def call(url: str, body: bytes) -> dict[str, str]:
        r = httpx.post(url + route, content=body, headers=headers, timeout=10)
        assert r.status_code == 400, r.text
        error: dict[str, str] = r.json()
        return error

    return call


def _stream(route: str) -> Callable[[str, bytes], dict[str, str]]:
    def call(url: str, body: bytes) -> dict[str, str]:
        r = httpx.post(url + route, content=envelope(body), headers=STREAM, timeout=10)
        assert r.status_code == 200, r.text
        return end_stream_error(r.content)

    return call


# The nesting goes in a field the message has: an unknown field's value is skipped by a reader
# that has its own limit, a known one's is parsed recursively.
RPCS = {
    "Filesystem/Stat": (_unary("/filesystem.Filesystem/Stat", UNARY), "path"),
    "Filesystem/Stat legacy SDK": (_unary("/filesystem.Filesystem/Stat", LEGACY_SDK), "path"),
    "Filesystem/WatchDir": (_stream("/filesystem.Filesystem/WatchDir"), "path"),
    "Process/SendInput": (_unary("/process.Process/SendInput", UNARY), "process"),
    "Process/Start": (_stream("/process.Process/Start"), "process"),
    "Process/StreamInput": (_stream("/process.Process/StreamInput"), "start"),
}


@pytest.mark.parametrize("rpc", RPCS)
def test_deep_nesting_is_invalid_argument_and_envd_survives(
    envd_factory: Callable[..., EnvdProcess], rpc: str
) -> None:
    daemon = envd_factory()  # its own daemon: before the fix this request killed it
    call, field = RPCS[rpc]
    error = call(daemon.url, nested(CRASH_DEPTH, field))
    assert error["code"] == "invalid_argument"
    assert f"nested deeper than {JSON_DEPTH_LIMIT} levels" in error["message"]
    assert_alive(daemon)


def test_top_level_array(envd_factory: Callable[..., EnvdProcess]) -> None:
    daemon = envd_factory()
    body = b"[" * CRASH_DEPTH + b"]" * CRASH_DEPTH
    error = RPCS["Filesystem/Stat"][0](daemon.url, body)
    assert error["code"] == "invalid_argument"
    assert_alive(daemon)


def test_limit_is_exact(envd: EnvdProcess) -> None:
    """Nesting up to the limit reaches the parser (an unknown field is ignored); one more
    level does not."""
    at_limit = b'{"path":"/","unknown":%s%s}' % (
        b"[" * (JSON_DEPTH_LIMIT - 1),
        b"]" * (JSON_DEPTH_LIMIT - 1),
    )
    r = httpx.post(envd.url + "/filesystem.Filesystem/Stat", content=at_limit, headers=UNARY)
    assert r.status_code == 200, r.text
    over = at_limit.replace(b"[", b"[[", 1).replace(b"]", b"]]", 1)
    r = httpx.post(envd.url + "/filesystem.Filesystem/Stat", content=over, headers=UNARY)
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_argument"


def test_brackets_inside_strings_do_not_count(envd: EnvdProcess) -> None:
    name = '[{\\"' * CRASH_DEPTH  # a path full of brackets and escaped quotes
    body = json.dumps({"path": f"/nonexistent/{name}"}).encode()
    r = httpx.post(envd.url + "/filesystem.Filesystem/Stat", content=body, headers=UNARY)
    assert r.json()["code"] != "invalid_argument", r.text
