"""Hypothesis strategies shared by the fuzz tests: confined paths and users, headers, JSON values
and their encodings, Connect unary bodies and stream envelopes.

Everything path-like is drawn inside the sandbox (home/, scratch/, `~`, relative) and filtered
through the same Confinement the send gate uses; commands are never generated.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import struct
from typing import TYPE_CHECKING, Any, Final

from hypothesis import HealthCheck, settings, strategies as st

from tests.fuzz.safety import FIXED_ARGS, FuzzRequest
from tests.fuzz.sandbox import FUZZ_TOKEN

if TYPE_CHECKING:
    from tests.fuzz.safety import Confinement

# Every fuzz test runs with these, and its own example count. Fixed seed (derived from each
# test's name) and no example database: every run, on every machine, sends the same requests.
FUZZ_SETTINGS: Final = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
# A few names reused often, so requests of one example meet each other's files.
NAMES: Final = ("a", "b", "dir", "f.txt", "x y", "ü", ".hidden", "a.json", "...")
# Top-level keys never drawn at random: the fields that carry paths, users or commands.
_SENSITIVE_KEYS: Final = frozenset(
    {
        "path",
        "source",
        "destination",
        "process",
        "cmd",
        "args",
        "cwd",
        "sourcepaths",
        "username",
        "defaultuser",
        "defaultworkdir",
        "message",
    }
)
# Printable ASCII and Latin-1 letters: what any HTTP client can put in a header value.
_HEADER_TEXT: Final = st.characters(
    codec="latin-1", categories=("L", "N", "P", "S", "Zs"), exclude_characters="\x7f"
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
junk_keys = st.text(max_size=10).filter(
    lambda key: key.lower().replace("_", "") not in _SENSITIVE_KEYS
)
uint32ish = st.one_of(
    st.integers(min_value=0, max_value=300),
    st.sampled_from([0, 1, 65535, 65536, 2**32 - 1, 2**32, -1, 2**63]),
    st.integers(min_value=0, max_value=2**32 - 1).map(str),  # proto JSON allows quoted ints
    st.sampled_from(["1e2", "1.5", "", "x", None, True]),
)


@functools.cache  # built once: hypothesis validates a strategy on first use
def header_values(max_size: int = 24) -> st.SearchStrategy[str]:
    return st.text(_HEADER_TEXT, max_size=max_size).map(str.strip)


@functools.cache  # built once: hypothesis validates a strategy on first use
def paths(conf: Confinement, *, surrogates: bool = False) -> st.SearchStrategy[str]:
    """Paths the daemon resolves inside the sandbox: "", `~`, relative, or absolute under
    home/ or scratch/, with odd segments (unicode, `.`, `..` that stays inside, 255 and 256
    byte names, NUL)."""
    exclude = "/\x00"
    alphabet = st.characters(exclude_characters=exclude, exclude_categories=["Cs"])
    if surrogates:
        alphabet = st.characters(exclude_characters=exclude)
    segment = st.one_of(
        st.sampled_from(NAMES),
        st.sampled_from([".", "..", "n" * 255, "n" * 256, "a\\b", "~", "-", " "]),
        st.text(alphabet, min_size=1, max_size=10),
    )
    relative = st.builds(
        lambda parts, tail: "/".join(parts) + tail,
        st.lists(segment, min_size=1, max_size=4),
        st.sampled_from(["", "", "/", "//", "/."]),
    )
    rooted = st.builds(
        lambda root, sep, rest: root + sep + rest,
        st.sampled_from(conf.roots),
        st.sampled_from(["/", "//", "/./"]),
        relative,
    )
    odd = st.sampled_from(["", "~", "~/", "a\x00b", "~nosuchuser/x", "~root", *conf.roots])
    return st.one_of(odd, relative, relative.map(lambda p: "~/" + p), rooted).filter(conf.path_ok)


@functools.cache  # built once: hypothesis validates a strategy on first use
def unknown_users(conf: Confinement) -> st.SearchStrategy[str]:
    names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=10)
    return names.filter(lambda name: name != conf.username and conf.user_ok(name))


@functools.cache  # built once: hypothesis validates a strategy on first use
def usernames(conf: Confinement) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(conf.username), st.just(conf.username), st.just(""), unknown_users(conf)
    )


def basic_auth(user: str, password: str = "") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@functools.cache  # built once: hypothesis validates a strategy on first use
def auth_headers(conf: Confinement) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Mostly what a client of the sandbox sends (the token, maybe the throwaway user in Basic
    auth), so requests get past auth; now and then a wrong token or user, or a bad header."""
    token = [("X-Access-Token", FUZZ_TOKEN)]
    as_user = [("Authorization", basic_auth(conf.username))]
    odd: st.SearchStrategy[list[tuple[str, str]]] = st.one_of(
        st.sampled_from([[], [("X-Access-Token", "wrong")], [("X-Access-Token", "")]]),
        unknown_users(conf).map(lambda u: [*token, ("Authorization", basic_auth(u))]),
        st.sampled_from(["Basic", "Basic !!", "Basic Og==", "Bearer x", "basic QQ=="]).map(
            lambda v: [*token, ("Authorization", v)]
        ),
    )
    return st.one_of(*[st.just(token)] * 5, *[st.just(token + as_user)] * 3, odd)


@functools.cache  # built once: hypothesis validates a strategy on first use
def extra_headers() -> st.SearchStrategy[list[tuple[str, str]]]:
    """Headers some route reads, with odd values; and an Origin now and then (CORS)."""
    names = st.sampled_from(
        [
            "Range",
            "If-Range",
            "If-Modified-Since",
            "If-None-Match",
            "If-Match",
            "If-Unmodified-Since",
            "Accept-Encoding",
            "Content-Encoding",
            "Connect-Protocol-Version",
            "Connect-Timeout-Ms",
            "Connect-Accept-Encoding",
            "Keepalive-Ping-Interval",
            "User-Agent",
            "Origin",
            "Access-Control-Request-Method",
            "Access-Control-Request-Headers",
            "X-Metadata-Key",
            "X-Metadata-" + "k" * 300,
            "Grpc-Timeout",
        ]
    )
    special = st.sampled_from(
        [
            "bytes=0-0",
            "bytes=-1",
            "bytes=1-",
            "bytes=5-2",
            "bytes=0-1,2-3",
            "bytes=99999999999999999999-",
            "gzip",
            "identity",
            "gzip;q=0, identity;q=0",
            "*;q=0",
            "br",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Sun, 06 Nov 2994 08:49:37 GMT",
            '"x"',
            "*",
            "1",
            "0",
            "-5",
            "99999999999999999999",
            "connect-python",
            "http://example.invalid",
        ]
    )
    return st.lists(st.tuples(names, special | header_values()), max_size=3)


@st.composite
def json_bytes(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> bytes:
    """A JSON document in one of the encodings clients send, or a damaged one: truncated
    (every proper prefix of an object is invalid), with a BOM, or with lone surrogates
    written as raw (invalid) UTF-8."""
    value = draw(values)
    text = json.dumps(
        value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1]))
    )
    data = text.encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none"] * 16 + ["truncate", "bom", "trailing", "nul"]))
    if damage == "truncate" and data:
        return data[: draw(st.integers(min_value=0, max_value=len(data) - 1))]
    if damage == "bom":
        return b"\xef\xbb\xbf" + data
    if damage == "trailing":
        return data + draw(st.sampled_from([b" ", b"\n", b"x", b"{}", b"\x00"]))
    if damage == "nul":
        return data.replace(b'"', b'"\x00', 1)
    return data


@functools.cache  # built once: hypothesis validates a strategy on first use
def deep_json() -> st.SearchStrategy[bytes]:
    """Nesting far past any real message, built only of brackets (see safety.MAX_DECODED_DEPTH)."""
    return st.builds(
        lambda depth, wrap, open_: (
            (b'{"d":' if wrap else b"")
            + open_ * depth
            + (b"]" * depth if open_ == b"[" else b"")
            + (b"}" if wrap else b"")
        ),
        st.sampled_from([300, 5_000, 15_000, 20_000, 30_000, 100_000]),
        st.booleans(),
        st.sampled_from([b"[", b'{"d":']),
    )


def with_junk(fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """A message's fields, sometimes with unknown keys added, sometimes not an object at all."""
    extended = st.builds(
        lambda f, junk: {**junk, **f}, fields, st.dictionaries(junk_keys, json_values, max_size=2)
    )
    return st.one_of(*[fields] * 4, *[extended] * 2, scalars, st.lists(scalars, max_size=2))


def optional_fields(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with any subset of these fields."""
    return st.fixed_dictionaries({}, optional=fields)


@functools.cache  # built once: hypothesis validates a strategy on first use
def path_field(conf: Confinement) -> st.SearchStrategy[Any]:
    """A path field: a confined path, or a value of the wrong JSON type (never a free string)."""
    wrong = st.one_of(
        st.none(), st.booleans(), st.integers(), st.lists(st.sampled_from(NAMES), max_size=2)
    )
    return st.one_of(paths(conf, surrogates=True), paths(conf, surrogates=True), wrong)


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def envelope(flags: int, payload: bytes, length: int | None = None) -> bytes:
    return struct.pack(">BI", flags, len(payload) if length is None else length) + payload


@st.composite
def enveloped(
    draw: st.DrawFn, payloads: st.SearchStrategy[bytes]
) -> tuple[bytes, list[tuple[str, str]]]:
    """A Connect stream request body: one envelope (sometimes more, or a damaged one), and the
    headers its compression needs."""
    payload = draw(payloads)
    headers: list[tuple[str, str]] = []
    flags = draw(st.sampled_from([0] * 16 + [1, 2, 3, 0x80, 0xFF]))
    if flags & 1 and draw(st.booleans()):
        payload = gzip_bytes(payload)
        headers.append(
            ("Connect-Content-Encoding", draw(st.sampled_from(["gzip", "gzip", "br", "x"])))
        )
    length = draw(
        st.sampled_from([None] * 8 + [0, 1, 2**32 - 1])
        | st.integers(min_value=0, max_value=len(payload) + 8)
    )
    body = envelope(flags, payload, length)
    body += draw(
        st.sampled_from(
            [b""] * 6 + [envelope(0, payload), envelope(2, b"{}"), b"\x00", b"\x00\x00\x00"]
        )
    )
    return body, headers


@functools.cache  # built once: hypothesis validates a strategy on first use
def unary_content_types() -> st.SearchStrategy[str]:
    odd = [
        "application/proto",
        "application/connect+json",
        "text/plain",
        "",
        "application/json;charset=latin-1",
        "application/grpc-web+json",
        "application/JSON",
        "application/x-www-form-urlencoded",
        "application/grpc",
        "application/grpc+json",
    ]
    return st.sampled_from(["application/json"] * 40 + ["application/json; charset=utf-8", *odd])


@functools.cache  # built once: hypothesis validates a strategy on first use
def stream_content_types() -> st.SearchStrategy[str]:
    odd = [
        "application/connect+proto",
        "application/json",
        "application/connect+xml",
        "",
        "application/grpc",
        "application/grpc+json",
    ]
    return st.sampled_from(["application/connect+json"] * 30 + odd)


@functools.cache  # built once: hypothesis validates a strategy on first use
def connect_headers() -> st.SearchStrategy[list[tuple[str, str]]]:
    version = st.sampled_from(
        [[("Connect-Protocol-Version", "1")]] * 3 + [[], [("Connect-Protocol-Version", "2")]]
    )
    return st.builds(lambda a, b: a + b, version, extra_headers())


def message_bodies(
    messages: st.SearchStrategy[Any], *, deep: bool = True
) -> st.SearchStrategy[bytes]:
    """A Connect JSON body: mostly a (possibly damaged) message, else random bytes or deep
    nesting."""
    choices = [json_bytes(with_junk(messages))] * 8 + [st.binary(max_size=40)]
    if deep:
        choices.append(deep_json())
    return st.one_of(*choices)


def unary_requests(
    conf: Confinement, route: str, messages: st.SearchStrategy[Any]
) -> st.SearchStrategy[FuzzRequest]:
    """POST (or, as Connect allows for unary calls, GET) of one message to a unary RPC."""
    post = st.builds(
        lambda body, content_type, gzipped, auth, extra: FuzzRequest(
            "POST",
            route,
            headers=(
                ("Content-Type", content_type),
                *((("Content-Encoding", "gzip"),) if gzipped else ()),
                *auth,
                *extra,
            ),
            body=gzip_bytes(body) if gzipped else body,
        ),
        message_bodies(messages),
        unary_content_types(),
        st.sampled_from([False] * 6 + [True]),
        auth_headers(conf),
        connect_headers(),
    )
    get = st.builds(
        lambda body, b64, encoding, auth: FuzzRequest(
            "GET",
            route,
            params=(
                (
                    "message",
                    base64.urlsafe_b64encode(body).decode() if b64 else body.decode("latin-1"),
                ),
                ("encoding", encoding),
                *((("base64", "1"),) if b64 else ()),
                ("connect", "v1"),
            ),
            headers=tuple(auth),
        ),
        json_bytes(with_junk(messages)).filter(bytes.isascii),
        st.booleans(),
        st.sampled_from(["json", "json", "proto", "xml"]),
        auth_headers(conf),
    )
    # No RPC is marked free of side effects, so a GET is refused (405): keep it to a few.
    return st.one_of(*[post] * 9, get)


def stream_requests(
    conf: Confinement, route: str, messages: st.SearchStrategy[Any], *, read_whole: bool
) -> st.SearchStrategy[FuzzRequest]:
    """A server- or client-streaming call: the first envelope (and maybe more) of a JSON message."""
    return st.builds(
        lambda framed, content_type, auth, extra: FuzzRequest(
            "POST",
            route,
            headers=(("Content-Type", content_type), *framed[1], *auth, *extra),
            body=framed[0],
            read_whole_stream=read_whole,
        ),
        enveloped(message_bodies(messages)),
        stream_content_types(),
        auth_headers(conf),
        connect_headers(),
    )


@functools.cache  # built once: hypothesis validates a strategy on first use
def base64_fields() -> st.SearchStrategy[Any]:
    """A proto JSON `bytes` field: base64 (either alphabet), or something that is not."""
    return st.one_of(
        st.binary(max_size=16).map(lambda b: base64.b64encode(b).decode()),
        st.binary(max_size=16).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")),
        st.text(max_size=6),
        scalars,
    )


@functools.cache  # built once: hypothesis validates a strategy on first use
def fixed_args() -> st.SearchStrategy[list[str]]:
    return st.sampled_from([list(args) for args in FIXED_ARGS])
