"""Bounded fuzz run over the plain HTTP routes (/health, /metrics, /envs, /init, GET and POST
/files, /files/compose): methods, paths, query parameters, headers and bodies (raw, gzip,
multipart, JSON), against the sandboxed envd (conftest.py)."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings, strategies as st

from envd.http.signing import file_signature
from tests.fuzz.safety import FuzzRequest
from tests.fuzz.sandbox import FUZZ_TOKEN
from tests.fuzz.strategies import (
    FUZZ_SETTINGS,
    auth_headers,
    deep_json,
    extra_headers,
    gzip_bytes,
    header_values,
    json_bytes,
    json_values,
    junk_keys,
    optional_fields,
    path_field,
    paths,
    scalars,
    usernames,
    with_junk,
)

if TYPE_CHECKING:
    from tests.fuzz.conftest import FuzzRun
    from tests.fuzz.safety import Confinement

# Root: the sandbox needs useradd. The timeout leaves room to shrink a failure (a daemon
# restart per crashing attempt); a passing run takes seconds.
pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]

ROUTES = (
    "/health",
    "/metrics",
    "/envs",
    "/init",
    "/files",
    "/files/compose",
    "/",
    "/files/",
    "/Health",
    "//health",
    "/health/",
    "/files/compose/",
    "/files/compose/x",
    "/filesystem.Filesystem/",
    "/filesystem.Filesystem/Nope",
    "/process.Process/List/extra",
    "/%2e%2e/health",
    "/files%2Fcompose",
    "/metrics?",
)
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "PROPFIND")
# Files every /files and compose example starts with.
SEED_FILES = {"a": b"alpha\n", "b": b"", "dir/f.txt": b"x" * 5000, "a.json": b"{}"}


def _upload(path: str, data: bytes) -> FuzzRequest:
    return FuzzRequest(
        "POST",
        "/files",
        params=(("path", path),),
        headers=(("Content-Type", "application/octet-stream"), ("X-Access-Token", FUZZ_TOKEN)),
        body=data,
    )


# The token written with a JSON escape: the reference refuses it for the escape alone.
ESCAPED_TOKEN = "fuzz\\u002dtoken"  # noqa: S105  # a test token
SEEDING = tuple(_upload(path, data) for path, data in SEED_FILES.items())


def _query(conf: Confinement) -> st.SearchStrategy[list[tuple[str, str]]]:
    value = header_values()
    pair = st.one_of(
        st.tuples(st.just("path"), paths(conf)),
        st.tuples(st.just("username"), usernames(conf)),
        st.tuples(
            st.sampled_from(["signature", "signature_expiration", "encoding", "base64"]), value
        ),
        st.tuples(st.sampled_from(["signature_expiration"]), st.integers().map(str)),
        st.tuples(junk_keys.filter(lambda k: k not in ("path", "username")), value),
    )
    return st.lists(pair, max_size=4)


@functools.cache
def any_route(conf: Confinement) -> st.SearchStrategy[FuzzRequest]:
    method = st.sampled_from(METHODS) | st.text(
        st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ-"), min_size=1, max_size=8
    )
    path = st.sampled_from(ROUTES) | st.text(max_size=20).map(lambda p: "/" + quote(p, safe="/"))
    body = st.one_of(st.just(b""), st.binary(max_size=64), json_bytes(json_values))
    return st.builds(
        lambda m, p, q, auth, extra, b: FuzzRequest(m, p, tuple(q), (*auth, *extra), b),
        method,
        path,
        _query(conf),
        auth_headers(conf),
        extra_headers(),
        body,
    )


@st.composite
def _file_auth(
    draw: st.DrawFn, conf: Confinement, operation: str, path: str, username: str
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(query, headers) authorising a /files request: the header token, a signature (valid,
    expired or wrong), or nothing."""
    how = draw(st.sampled_from(["header", "header", "signed", "expired", "bad", "none", "headers"]))
    if how in ("header", "headers"):
        return [], draw(auth_headers(conf))
    if how == "none":
        return [], []
    expiration = draw(st.sampled_from([None, 4_000_000_000])) if how == "signed" else 1
    signature = file_signature(path, operation, username, FUZZ_TOKEN, expiration)
    if how == "bad":
        signature = draw(st.sampled_from(["", "v1_", signature[:-1], "v2_" + signature[3:]]))
    query = [("signature", signature)]
    if expiration is not None:
        query.append(("signature_expiration", str(expiration)))
    return query, []


@functools.cache
@st.composite
def download(draw: st.DrawFn, conf: Confinement) -> FuzzRequest:
    path = draw(st.sampled_from([*SEED_FILES, "dir", ""]) | paths(conf))
    username = draw(usernames(conf))
    query = [("path", path)] + ([("username", username)] if username else [])
    signed, headers = draw(_file_auth(conf, "read", path, username))
    method = draw(st.sampled_from(["GET", "GET", "GET", "HEAD"]))
    return FuzzRequest(
        method, "/files", tuple(query + signed), tuple(headers + draw(extra_headers()))
    )


@functools.cache
def _disposition(conf: Confinement) -> st.SearchStrategy[str]:
    filename = paths(conf).map(lambda p: p.replace('"', "").replace("\\", ""))
    return st.one_of(
        filename.map(lambda f: f'form-data; name="file"; filename="{f}"'),
        filename.map(lambda f: f"form-data; name=file; filename={quote(f)}"),
        filename.map(lambda f: "form-data; name=\"file\"; filename*=UTF-8''" + quote(f)),
        st.just('form-data; name="file"'),
        st.just('form-data; name="other"; filename="a"'),
        st.just("attachment"),
        header_values(),
    )


@functools.cache
@st.composite
def multipart_body(draw: st.DrawFn, conf: Confinement) -> tuple[bytes, str]:
    boundary = draw(
        st.text(st.sampled_from("abcXYZ0123456789'()+_,-./:=? "), min_size=1, max_size=70)
        .map(str.strip)
        .filter(bool)
    )
    if draw(st.booleans()):
        boundary = "b" * draw(st.integers(min_value=200, max_value=400))
    parts = []
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        headers = [("Content-Disposition", draw(_disposition(conf)))]
        headers += draw(
            st.lists(
                st.tuples(st.sampled_from(["Content-Type", "X-Other"]), header_values()), max_size=1
            )
        )
        head = "".join(f"{k}: {v}\r\n" for k, v in headers).encode()  # UTF-8, as browsers send
        parts.append(
            b"--"
            + boundary.encode()
            + b"\r\n"
            + head
            + b"\r\n"
            + draw(st.binary(max_size=64))
            + b"\r\n"
        )
    end = draw(
        st.sampled_from(
            [b"--" + boundary.encode() + b"--\r\n", b"", b"--" + boundary.encode(), b"--x--\r\n"]
        )
    )
    body = draw(st.sampled_from([b"", b"preamble\r\n"])) + b"".join(parts) + end
    quoted = draw(st.booleans())
    content_type = (
        f'multipart/form-data; boundary="{boundary}"'
        if quoted
        else f"multipart/form-data; boundary={boundary}"
    )
    return body, draw(
        st.sampled_from(
            [
                content_type,
                content_type,
                "multipart/mixed; boundary=" + boundary,
                "multipart/form-data",
            ]
        )
    )


@functools.cache
@st.composite
def upload(draw: st.DrawFn, conf: Confinement) -> FuzzRequest:
    kind = draw(st.sampled_from(["raw", "raw", "multipart", "multipart", "other"]))
    query: list[tuple[str, str]] = []
    if kind == "raw":
        body, content_type = draw(st.binary(max_size=200)), "application/octet-stream"
        if draw(st.integers(0, 9)):  # usually: the path a raw upload needs
            query.append(
                ("path", draw(st.sampled_from([*SEED_FILES, "new/deep/file"]) | paths(conf)))
            )
    elif kind == "multipart":
        body, content_type = draw(multipart_body(conf))
        if draw(st.booleans()):
            query.append(("path", draw(paths(conf))))
    else:
        body, content_type = draw(st.binary(max_size=32)), draw(header_values())
    username = draw(usernames(conf))
    if username:
        query.append(("username", username))
    path = next((v for k, v in query if k == "path"), "")
    signed, headers = draw(_file_auth(conf, "write", path, username))
    headers.append(("Content-Type", content_type))
    encoding = draw(
        st.sampled_from([None, None, None, "gzip", "gzip", "identity", "br", "gzip, gzip"])
    )
    if encoding is not None:
        headers.append(("Content-Encoding", encoding))
        if encoding == "gzip" and draw(st.integers(0, 4)):
            body = gzip_bytes(body) * draw(st.sampled_from([1, 1, 2]))
            body = body[: draw(st.sampled_from([len(body), len(body), len(body) // 2]))]
    metadata = st.tuples(
        st.sampled_from(["X-Metadata-Key", "X-Metadata-k2", "X-Metadata-"]), header_values()
    )
    headers += draw(st.lists(metadata, max_size=2))
    return FuzzRequest("POST", "/files", tuple(query + signed), tuple(headers), body)


@functools.cache
def compose(conf: Confinement) -> st.SearchStrategy[FuzzRequest]:
    source = st.sampled_from(list(SEED_FILES)) | path_field(conf)
    fields = optional_fields(
        source_paths=st.lists(source, max_size=4) | scalars,
        destination=path_field(conf),
        username=usernames(conf) | scalars,
    )
    bodies = [json_bytes(with_junk(fields))] * 6 + [st.binary(max_size=40), deep_json()]
    return st.builds(
        lambda body, auth, extra, content_type: FuzzRequest(
            "POST", "/files/compose", (), (*auth, *extra, ("Content-Type", content_type)), body
        ),
        st.one_of(bodies),
        auth_headers(conf),
        extra_headers(),
        st.sampled_from(["application/json", "application/json", "text/plain", ""]),
    )


def _case_variants(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from([name, name, name.lower(), name.upper()])


@functools.cache
def _init_fields(conf: Confinement) -> dict[str, st.SearchStrategy[Any]]:
    timestamps = st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123456789+01:00",
            "1970-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+99:00",
            "2026-01-01",
            "",
        ]
    )
    return {
        "envVars": st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.none(), max_size=3)
        | scalars,
        "timestamp": timestamps | scalars,
        "defaultUser": usernames(conf) | scalars,
        "defaultWorkdir": path_field(conf),
        "hyperloopIP": header_values() | scalars,
        "caBundle": header_values() | scalars,
        "lifecycleID": header_values() | scalars,
        "volumeMounts": st.lists(json_values, max_size=2) | scalars,
    }


@functools.cache
@st.composite
def init(draw: st.DrawFn, conf: Confinement) -> FuzzRequest:
    values = _init_fields(conf)
    chosen = draw(st.lists(st.sampled_from(list(values)), unique=True, max_size=5))
    fields = {draw(_case_variants(name)): draw(values[name]) for name in chosen}
    # Mostly the right token: without it, /init stops at the token check.
    token = draw(st.sampled_from([FUZZ_TOKEN] * 6 + [None, "", "other", 5, ESCAPED_TOKEN]))
    if token is not None:
        fields[draw(_case_variants("accessToken"))] = token
    text = json.dumps({**draw(st.dictionaries(junk_keys, json_values, max_size=1)), **fields})
    # The escaped token reaches the wire as written (json.dumps would double its backslash).
    text = text.replace(json.dumps(ESCAPED_TOKEN)[1:-1], ESCAPED_TOKEN)
    body = draw(st.sampled_from([text.encode()] * 6 + [b"", b"null", b"[]", b"{", b"\xff"]))
    headers = draw(st.sampled_from([[("X-Access-Token", FUZZ_TOKEN)], []]))
    return FuzzRequest("POST", "/init", (), (*headers, ("Content-Type", "application/json")), body)


def _after_init() -> st.SearchStrategy[list[FuzzRequest]]:
    """What /init changes shows up here: the env store, and the default user and workdir."""
    token = (("X-Access-Token", FUZZ_TOKEN),)
    stat = FuzzRequest(
        "POST",
        "/filesystem.Filesystem/Stat",
        (),
        (*token, ("Content-Type", "application/json")),
        b"{}",
    )
    return st.lists(
        st.sampled_from([FuzzRequest("GET", "/envs", (), token), stat, _upload("", b"x")]),
        max_size=2,
    )


@settings(FUZZ_SETTINGS, max_examples=500)
@given(data=st.data())
def test_any_route(fuzz: FuzzRun, data: st.DataObject) -> None:
    fuzz.run(data.draw(st.lists(any_route(fuzz.conf), min_size=1, max_size=3)))


@settings(FUZZ_SETTINGS, max_examples=250)
@given(data=st.data())
def test_files(fuzz: FuzzRun, data: st.DataObject) -> None:
    calls = st.one_of(download(fuzz.conf), upload(fuzz.conf))
    fuzz.run([*SEEDING, *data.draw(st.lists(calls, min_size=1, max_size=4))])


@settings(FUZZ_SETTINGS, max_examples=120)
@given(data=st.data())
def test_files_compose(fuzz: FuzzRun, data: st.DataObject) -> None:
    fuzz.run([*SEEDING, *data.draw(st.lists(compose(fuzz.conf), min_size=1, max_size=3))])


@settings(FUZZ_SETTINGS, max_examples=200)
@given(data=st.data())
def test_init(fuzz: FuzzRun, data: st.DataObject) -> None:
    fuzz.run([data.draw(init(fuzz.conf)), *data.draw(_after_init())])
