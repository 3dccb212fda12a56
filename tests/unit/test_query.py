"""parse_query reads a query string exactly as Starlette's request.query_params does, which
the /files routes used before and whose reading clients already depend on."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from starlette.datastructures import QueryParams

from envd.http.query import parse_query

# Pieces that exercise every branch: separators, escapes valid and not, UTF-8 split across
# escapes, and raw bytes beyond ASCII (read as Latin-1).
_PIECES = (
    *(b"a", b"/", b"=", b"&", b"+", b"%", b"%2F", b"%zz", b"%C3", b"%A9", b"%E2%82"),
    *(b"%00", b"%ff", b"~", b";", b"\xc3", b"\xa9", b"\x80", b" ", b"2F", b"%2f", b"%2"),
)


@given(st.lists(st.sampled_from(_PIECES), max_size=16).map(b"".join))
def test_reads_as_starlette_does(raw: bytes) -> None:
    assert parse_query(raw) == dict(QueryParams(raw))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", {}),
        (
            b"path=%2Fhome%2Fuser%2Fa+b.txt&username=user",
            {"path": "/home/user/a b.txt", "username": "user"},
        ),
        (b"path&x=", {"path": "", "x": ""}),
        (b"path=%C3%A9&path=last", {"path": "last"}),
        (b"path=%C3", {"path": "\ufffd"}),
        (b"path=\xc3\xa9", {"path": "\xc3\xa9"}),
    ],
)
def test_examples(raw: bytes, expected: dict[str, str]) -> None:
    assert parse_query(raw) == expected
