"""The send gate (safety.py) refuses every way of reaching outside the sandbox that the fuzz
strategies could stumble on, and lets confined requests through. No daemon needed."""

from __future__ import annotations

import base64
import gzip
import json
import struct
from pathlib import Path

import pytest

from tests.fuzz.safety import Confinement, FuzzRequest
from tests.fuzz.sandbox import Sandbox

ROOT = Path("/tmp/envd-fuzz-gate")
CONF = Confinement(
    Sandbox(ROOT, ROOT / "home", ROOT / "scratch", "envdfuzzgate", 60000, 60000, ROOT)
)
JSON = (("Content-Type", "application/json"),)
STREAM = (("Content-Type", "application/connect+json"),)


def rpc(name: str, message: object) -> FuzzRequest:
    return FuzzRequest(
        "POST", f"/filesystem.Filesystem/{name}", (), JSON, json.dumps(message).encode()
    )


def envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


REFUSED = {
    "Remove /": rpc("Remove", {"path": "/"}),
    "Remove escaping home": rpc("Remove", {"path": "~/../../etc"}),
    "Remove escaping with backslash": rpc("Remove", {"path": "~\\.."}),
    "Remove of the sandbox's parent": rpc("Remove", {"path": str(ROOT)}),
    "relative escape": rpc("Stat", {"path": "a/../../../etc"}),
    "double slash": rpc("Stat", {"path": "/" + str(ROOT / "home")}),
    "Move destination": rpc("Move", {"source": "a", "destination": "/etc/x"}),
    "unknown fields do not hide a path": rpc("MakeDir", {"x": 1, "path": "/x"}),
    "escaped path": FuzzRequest(
        "POST", "/filesystem.Filesystem/Remove", (), JSON, b'{"path":"\\u002fetc"}'
    ),
    "gzip body": FuzzRequest(
        "POST",
        "/filesystem.Filesystem/Remove",
        (),
        (*JSON, ("Content-Encoding", "gzip")),
        gzip.compress(b'{"path":"/"}'),
    ),
    "binary body": FuzzRequest(
        "POST",
        "/filesystem.Filesystem/Remove",
        (),
        (("Content-Type", "application/proto"),),
        b"\x0a\x01/",
    ),
    "GET message": FuzzRequest(
        "GET",
        "/filesystem.Filesystem/Remove",
        (("message", base64.urlsafe_b64encode(b'{"path":"/"}').decode()), ("base64", "1")),
    ),
    "Start of another command": FuzzRequest(
        "POST", "/process.Process/Start", (), STREAM, envelope(b'{"process":{"cmd":"rm"}}')
    ),
    "Start with other arguments": FuzzRequest(
        "POST",
        "/process.Process/Start",
        (),
        STREAM,
        envelope(b'{"process":{"cmd":"echo","args":["-rf"]}}'),
    ),
    "Start in /": FuzzRequest(
        "POST",
        "/process.Process/Start",
        (),
        STREAM,
        envelope(b'{"process":{"cmd":"true","cwd":"/"}}'),
    ),
    "WatchDir envelope": FuzzRequest(
        "POST", "/filesystem.Filesystem/WatchDir", (), STREAM, envelope(b'{"path":"/"}')
    ),
    "download path": FuzzRequest("GET", "/files", (("path", "/etc/passwd"),)),
    "username root": FuzzRequest("GET", "/files", (("path", "a"), ("username", "root"))),
    "Basic-auth root": FuzzRequest(
        "POST",
        "/filesystem.Filesystem/Stat",
        (),
        (*JSON, ("Authorization", "Basic " + base64.b64encode(b"root:").decode())),
        b"{}",
    ),
    "compose destination": FuzzRequest(
        "POST", "/files/compose", (), JSON, b'{"source_paths":["a"],"destination":"/x"}'
    ),
    "compose user": FuzzRequest(
        "POST",
        "/files/compose",
        (),
        JSON,
        b'{"source_paths":["a"],"destination":"b","username":"root"}',
    ),
    "init workdir": FuzzRequest("POST", "/init", (), JSON, b'{"defaultWorkdir":"/"}'),
    "init user, any case": FuzzRequest("POST", "/init", (), JSON, b'{"DEFAULTUSER":"root"}'),
    "multipart filename": FuzzRequest(
        "POST",
        "/files",
        (),
        (("Content-Type", "multipart/form-data; boundary=b"),),
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="../../x"\r\n\r\nx\r\n--b--',
    ),
    "deep body with a path in it": FuzzRequest(
        "POST",
        "/filesystem.Filesystem/Remove",
        (),
        JSON,
        b'{"path":"/","d":' + b"[" * 300 + b"]" * 300 + b"}",
    ),
}

ALLOWED = {
    "home": rpc("Remove", {"path": str(ROOT / "home" / "a")}),
    "scratch root": rpc("Stat", {"path": str(ROOT / "scratch")}),
    "relative": rpc("MakeDir", {"path": "a/b/../c"}),
    "tilde": rpc("Stat", {"path": "~/x"}),
    "empty (default workdir or home)": rpc("Remove", {"path": ""}),
    "refused by the daemon itself": rpc("Stat", {"path": "~root"}),
    "unknown user": FuzzRequest("GET", "/files", (("path", "a"), ("username", "nosuchuserxyz"))),
    "fixed command": FuzzRequest(
        "POST",
        "/process.Process/Start",
        (),
        STREAM,
        envelope(b'{"process":{"cmd":"echo","args":["hi"],"cwd":"~"}}'),
    ),
    "deep brackets only": FuzzRequest(
        "POST", "/filesystem.Filesystem/Stat", (), JSON, b"[" * 20_000 + b"]" * 20_000
    ),
}


@pytest.mark.parametrize("request_", REFUSED.values(), ids=REFUSED.keys())
def test_refused(request_: FuzzRequest) -> None:
    assert CONF.problem(request_) is not None


@pytest.mark.parametrize("request_", ALLOWED.values(), ids=ALLOWED.keys())
def test_allowed(request_: FuzzRequest) -> None:
    assert CONF.problem(request_) is None
