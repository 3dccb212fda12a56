"""gRPC over envd's HTTP/1.1 is refused with 415, as Connect refuses any content type it does
not serve (it needs trailers: connectrpc answered 200 `grpc-status: 2` and logged a traceback
per request). gRPC-Web, which frames its trailers in the body, keeps working."""

from __future__ import annotations

import base64
import json
import struct
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from tests.envd_process import EnvdProcess

GRPC_TYPES = ["application/grpc", "application/grpc+proto", "application/grpc+json"]
GRPC_WEB = "application/grpc-web, application/grpc-web+json, application/grpc-web+proto"


def frame(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def frames(body: bytes) -> list[tuple[int, bytes]]:
    found = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        found.append((flags, body[5 : 5 + size]))
        body = body[5 + size :]
    return found


@pytest.mark.parametrize("content_type", GRPC_TYPES)
@pytest.mark.parametrize(
    ("route", "accepted"),
    [
        ("/filesystem.Filesystem/Stat", "application/json, application/proto, " + GRPC_WEB),
        (
            "/process.Process/Start",
            "application/connect+json, application/connect+proto, " + GRPC_WEB,
        ),
    ],
    ids=["unary", "stream"],
)
def test_grpc_is_unsupported_media_type(
    envd: EnvdProcess, route: str, accepted: str, content_type: str
) -> None:
    body = frame(b'{"path": "/"}' if content_type.endswith("json") else b"\x0a\x01/")
    with httpx.Client(base_url=envd.url) as client:
        r = client.post(route, content=body, headers={"content-type": content_type})
        assert r.status_code == 415
        assert r.headers["accept-post"] == accepted
        assert "grpc-status" not in r.headers
        # The same keep-alive connection still serves Connect.
        assert client.post("/filesystem.Filesystem/Stat", json={"path": "/"}).status_code == 200


def test_unknown_method_is_still_404(envd: EnvdProcess) -> None:
    r = httpx.post(
        envd.url + "/filesystem.Filesystem/Nope",
        content=frame(b""),
        headers={"content-type": "application/grpc"},
    )
    assert r.status_code == 404


def test_grpc_web_still_works(envd: EnvdProcess) -> None:
    headers = {"content-type": "application/grpc-web+json"}
    r = httpx.post(
        envd.url + "/filesystem.Filesystem/Stat", content=frame(b'{"path":"/"}'), headers=headers
    )
    (flags, message), (trailer_flags, trailers) = frames(r.content)
    assert json.loads(message)["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert (flags, trailer_flags) == (0, 0x80)
    assert b"grpc-status: 0" in trailers

    start = {"process": {"cmd": "/bin/echo", "args": ["over grpc-web"]}}
    r = httpx.post(
        envd.url + "/process.Process/Start",
        content=frame(json.dumps(start).encode()),
        headers=headers,
        timeout=30,
    )
    events = [json.loads(m)["event"] for f, m in frames(r.content) if not f & 0x80]
    stdout = b"".join(base64.b64decode(e["data"]["stdout"]) for e in events if "data" in e)
    assert stdout == b"over grpc-web\n"
    assert frames(r.content)[-1][1].startswith(b"grpc-status: 0")
