"""Who may call, over the wire: the X-Access-Token gate, its exempt routes, Basic-auth user
selection errors (unary and streaming Connect) and CORS."""

from __future__ import annotations

import base64
import json
import struct
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.envd_process import EnvdProcess

TOKEN = "tok-\N{GREEK SMALL LETTER ALPHA}"  # noqa: S105  # a test value; non-ASCII on purpose
UNAUTHORIZED = {
    "code": 401,
    "message": "unauthorized access, please provide a valid access token or method signing if supported",
}
EXPOSED = (
    "Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, "
    "X-Content-Type-Options"
)
JSON = {"Content-Type": "application/json"}
JSON_RAW = {b"Content-Type": b"application/json"}


@pytest.fixture
def guarded(envd_factory: Callable[..., EnvdProcess]) -> Iterator[httpx.Client]:
    """A daemon whose access token is set."""
    with httpx.Client(base_url=envd_factory().url, timeout=30) as client:
        assert client.post("/init", json={"accessToken": TOKEN}).status_code == 204
        yield client


def _token_header(token: str) -> dict[bytes, bytes]:
    return {b"X-Access-Token": token.encode()}  # raw UTF-8 bytes, as a Go client sends them


GUARDED_REQUESTS = [
    ("GET", "/envs", None),
    ("GET", "/metrics", None),
    ("POST", "/process.Process/List", b"{}"),
    ("POST", "/filesystem.Filesystem/Stat", b'{"path": "/"}'),
    ("POST", "/files/compose", b"{}"),
    # Exemptions match method and path exactly.
    ("HEAD", "/health", None),
    ("GET", "/health/", None),
    ("POST", "/init/", None),
    ("PUT", "/files", None),
    ("GET", "/no/such/route", None),
]


def test_token_required_on_every_other_route(guarded: httpx.Client) -> None:
    wrong = [{}, _token_header("tok-"), _token_header(TOKEN + "x"), _token_header("")]
    for method, path, body in GUARDED_REQUESTS:
        for headers in wrong:
            r = guarded.request(method, path, content=body, headers={**JSON_RAW, **headers})
            assert r.status_code == 401, (method, path, headers)
            if method != "HEAD":
                assert r.json() == UNAUTHORIZED
            assert r.headers["content-type"] == "application/json; charset=utf-8"
            assert r.headers["x-content-type-options"] == "nosniff"
        right = {**JSON_RAW, **_token_header(TOKEN)}
        assert guarded.request(method, path, content=body, headers=right).status_code != 401


def test_exempt_routes_answer_without_a_token(guarded: httpx.Client) -> None:
    assert guarded.get("/health").status_code == 204
    # /files authenticates itself (signatures): whatever it answers, it is not the gate's 401.
    for method in ["GET", "POST"]:
        r = guarded.request(method, "/files", params={"path": "/tmp/x"})
        assert r.content.find(b"unauthorized access") == -1, r.text
    # /init checks the token itself and answers in plain text.
    r = guarded.post("/init", json={})
    assert (r.status_code, r.text) == (401, "access token reset not authorized")


def _basic(credentials: bytes) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials).decode()}


def test_unknown_basic_auth_user_is_rejected_on_every_route(http: httpx.Client) -> None:
    expected = {"code": "unauthenticated", "message": "invalid username: 'nosuchuser'"}
    for method, path, body in [
        ("GET", "/health", None),
        ("GET", "/envs", None),
        ("GET", "/files", None),
        ("POST", "/init", b"{}"),
        ("POST", "/process.Process/List", b"{}"),
    ]:
        r = http.request(method, path, content=body, headers={**JSON, **_basic(b"nosuchuser:")})
        assert r.status_code == 401, path
        assert r.headers["content-type"] == "application/json"
        assert r.json() == expected


def test_basic_auth_parsing_follows_go(http: httpx.Client) -> None:
    # An empty user name is looked up (and fails); no colon means no credentials at all.
    r = http.get("/health", headers=_basic(b":"))
    assert (r.status_code, r.json()["message"]) == (401, "invalid username: ''")
    assert http.get("/health", headers=_basic(b"nosuchuser")).status_code == 204
    assert http.get("/health", headers={"Authorization": "Bearer x"}).status_code == 204
    assert http.get("/health", headers={"Authorization": "Basic !!!"}).status_code == 204
    assert http.get("/health", headers=_basic(b"root:any password")).status_code == 204
    r = http.get("/health", headers={"Authorization": "bAsIc " + base64.b64encode(b"x:").decode()})
    assert r.status_code == 401


def test_unknown_user_on_a_connect_stream_is_an_end_of_stream_error(http: httpx.Client) -> None:
    payload = json.dumps({"path": "/tmp"}).encode()
    r = http.post(
        "/filesystem.Filesystem/WatchDir",
        content=struct.pack(">BI", 0, len(payload)) + payload,
        headers={"Content-Type": "application/connect+json", **_basic(b"nosuchuser:")},
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/connect+json"
    flags, length = struct.unpack(">BI", r.content[:5])
    assert flags == 0x02
    assert len(r.content) == 5 + length
    assert json.loads(r.content[5:]) == {
        "error": {"code": "unauthenticated", "message": "invalid username: 'nosuchuser'"}
    }


def test_preflight_is_answered_before_auth(guarded: httpx.Client) -> None:
    r = guarded.options(
        "/process.Process/Start",
        headers={
            "Origin": "https://example.test",
            "Access-Control-Request-Method": "post",
            "Access-Control-Request-Headers": "content-type, x-access-token, connect-protocol-version",
        },
    )
    assert r.status_code == 204
    assert r.content == b""
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-methods"] == "POST"
    assert r.headers["access-control-allow-headers"] == (
        "content-type, x-access-token, connect-protocol-version"
    )
    assert r.headers["access-control-max-age"] == "7200"


def test_preflight_for_a_method_outside_the_list_gets_no_grant(http: httpx.Client) -> None:
    r = http.options(
        "/envs", headers={"Origin": "https://a.test", "Access-Control-Request-Method": "TRACE"}
    )
    assert r.status_code == 204
    assert "access-control-allow-origin" not in r.headers


def test_cors_headers_only_when_origin_is_sent(guarded: httpx.Client) -> None:
    origin = {"Origin": "https://example.test"}
    for r in [guarded.get("/health", headers=origin), guarded.get("/envs", headers=origin)]:
        assert r.headers["access-control-allow-origin"] == "*"
        assert r.headers["access-control-expose-headers"] == EXPOSED
        assert r.headers["vary"] == "Origin"
    r = guarded.get("/health")
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-expose-headers" not in r.headers
