"""POST /files multipart: a body that arrives whole is split in one pass (whole_body_events),
any other goes through python-multipart. The same bodies, well formed or not, are sent both
ways and must give the same answer and leave the same files."""

from __future__ import annotations

import gzip
import re
import shutil
from typing import TYPE_CHECKING

import httpx
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from envd.http.multipart_parts import whole_body_events

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BOUNDARY = b"b0und"
CONTENT_TYPE = "multipart/form-data; boundary=" + BOUNDARY.decode()
DELIMITER = b"\r\n--" + BOUNDARY
OPENING = b"--" + BOUNDARY + b"\r\n"
# What a file holds before each upload, so that a truncated or half-written one shows.
OLD = b"old content"

# Bytes that sit near the parsers' decisions: delimiter look-alikes, transport padding, bare
# CR and LF, header syntax.
_NASTY = [
    b"\r",
    b"\n",
    b"\r\n",
    b"-",
    b"--",
    b":",
    b" ",
    b"\t",
    b"\x00",
    b"\xff",
    BOUNDARY,
    DELIMITER,
    DELIMITER + b"\r\n",
    DELIMITER + b"--",
    DELIMITER + b"x",
    DELIMITER + b"-x",
    DELIMITER + b" \r\n",
    DELIMITER + b"\t \r\n",
    b"--" + BOUNDARY + b"\r\n",
]


def _dispositions(workdir: Path) -> st.SearchStrategy[bytes]:
    a, b = f"{workdir}/a".encode(), f"{workdir}/sub/b".encode()
    return st.sampled_from(
        [
            b'Content-Disposition: form-data; name="file"; filename="' + a + b'"',
            b'Content-Disposition: form-data; name="file"; filename="' + b + b'"',
            b"content-disposition:form-data;name=file;filename=" + b,
            b"Content-Disposition:    form-data; name=file; filename=" + a,
            b'Content-Disposition: form-data; name="file"; filename="x"; filename*=utf-8\'\''
            + b.replace(b"/", b"%2F"),
            b"Content-Disposition: form-data; name=\"file\"; filename*=bogus''" + a,
            b'Content-Disposition: form-data; name="file"',
            b'Content-Disposition: form-data; name="file"; filename=""',
            b'Content-Disposition: form-data; name="note"; filename="' + a + b'"',
            b"Content-Disposition: form-data; name=note",
        ]
    )


# Mostly good lines: one bad line spoils the body for both paths.
_EXTRA_HEADERS = st.one_of(
    *[
        st.sampled_from(
            [
                b"Content-Type: application/octet-stream",
                b"X-Empty:",
                b"X-Spaces:   ",
                b"X-Tab:\tvalue",
                b"X-Bare-LF: a\nb",
                b'Content-Disposition: form-data; name="file"; filename="/second/wins/not"',
            ]
        )
    ]
    * 18,
    st.sampled_from([b"X-Bare-CR: a\rb", b"no-colon", b": no field", b"Bad Field: v"]),
    # Around python-multipart's limit on one header line (4224 bytes).
    st.integers(4200, 4240).map(lambda n: b"X-Long: " + b"h" * (n - 8)),
)

_DATA = st.lists(st.one_of(st.sampled_from(_NASTY), *[st.binary(max_size=40)] * 3), max_size=6).map(
    b"".join
)


@st.composite
def _bodies(draw: st.DrawFn, workdir: Path) -> bytes:
    """A body in the plain form, often mutated: the mutations make the malformed ones."""
    out = [b""]
    for index in range(draw(st.integers(0, 3))):
        out.append((b"--" + BOUNDARY if index == 0 else DELIMITER) + b"\r\n")
        lines = [draw(_dispositions(workdir))]
        # python-multipart allows 8 header lines.
        count = draw(st.sampled_from([0, 1, 2, 7, 8]))
        lines += draw(st.lists(_EXTRA_HEADERS, min_size=count, max_size=count))
        lines = draw(st.permutations(lines))
        out.append(b"".join(line + b"\r\n" for line in lines) + b"\r\n")
        out.append(draw(_DATA))
    closings = [b"--", b"--\r\n", b"--\r\n", b"--epilogue" + DELIMITER + b"\r\n", b"-", b""]
    closing = draw(st.sampled_from(closings))
    out.append((DELIMITER if len(out) > 1 else b"--" + BOUNDARY) + closing)
    body = b"".join(out)
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        at = draw(st.integers(0, len(body)))
        mutation = draw(st.sampled_from(["insert", "delete", "cut"]))
        if mutation == "insert":
            body = body[:at] + draw(st.sampled_from(_NASTY)) + body[at:]
        elif mutation == "delete":
            body = body[:at] + body[at + draw(st.integers(1, 8)) :]
        else:
            body = body[:at]
    return body


def _snapshot(workdir: Path) -> dict[str, bytes | None]:
    """Every entry under `workdir`: a file's content, None for a directory."""
    return {
        str(p.relative_to(workdir)): None if p.is_dir() else p.read_bytes()
        for p in sorted(workdir.rglob("*"))
    }


def _upload(
    http: httpx.Client, workdir: Path, content: bytes | Iterator[bytes], params: dict[str, str]
) -> object:
    """The answer (status, JSON) and the files left, from a clean `workdir` holding `a`."""
    for entry in workdir.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (workdir / "a").write_bytes(OLD)
    headers = {"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"}
    r = http.post("/files", params=params, content=content, headers=headers)
    answer = r.json()
    if r.status_code != 200:
        # python-multipart's messages give offsets into the chunk it was handed.
        answer["message"] = re.sub(r"\d+", "N", answer["message"])
    return r.status_code, answer, _snapshot(workdir)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), with_path=st.booleans())
def test_whole_and_streamed_bodies_agree(
    http: httpx.Client, workdir: Path, data: st.DataObject, with_path: bool
) -> None:
    body = data.draw(_bodies(workdir))
    # Any other body is python-multipart's alone, whole, as before the whole-body path.
    assume(body.startswith(OPENING))
    params = {"path": f"{workdir}/p"} if with_path else {}
    # One gzip member arrives as one chunk of the decoded body (the whole-body path when the
    # body is plain). Two members arrive as two chunks, the first just the opening delimiter,
    # too short for that path, so python-multipart parses the body (split where its state
    # does not depend on where a chunk ends); sent chunked, without a Content-Length, so that
    # envd does not gather them into one.
    whole = _upload(http, workdir, gzip.compress(body), params)
    split = [gzip.compress(OPENING) + gzip.compress(body[len(OPENING) :])]
    assert whole == _upload(http, workdir, iter(split), params)


def test_sdk_body_takes_the_whole_body_path() -> None:
    """What httpx (and so the SDK's files.write) sends is in the plain form."""
    request = httpx.Request(
        "POST", "http://envd/files", files=[("file", ("/a", b"x\r\n")), ("file", ("/b", b""))]
    )
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    events = whole_body_events(request.read(), boundary)
    assert events is not None
    assert [type(event) for event in events] == [dict, memoryview, type(None), dict, type(None)]
    first, data = events[:2]
    assert isinstance(first, dict)
    assert first["content-disposition"] == b'form-data; name="file"; filename="/a"'
    assert isinstance(data, memoryview)
    assert bytes(data) == b"x\r\n"
