"""ListDir's hand-written bytes (envd/filesystem/listing.py) against the stock codecs over the
wire: a tree with odd names, symlinks, metadata, owners, modes and timestamps, listed at several
depths in both codecs, gzipped or not, must come back as exactly the bytes the generated
message classes encode for the same entries, built one by one with entry_from_lstat."""

from __future__ import annotations

import gzip
import os
import posixpath
import stat
import struct
from typing import TYPE_CHECKING

import httpx
import pytest
from connectrpc.codec import proto_binary_codec, proto_json_codec

from envd._gen.filesystem.filesystem_pb import ListDirRequest, ListDirResponse
from envd.filesystem.entries import entry_from_lstat

if TYPE_CHECKING:
    from pathlib import Path

    from envd._gen.filesystem.filesystem_pb import EntryInfo
    from tests.envd_process import EnvdProcess

_CODECS = {"proto": proto_binary_codec(), "json": proto_json_codec()}
_URL_PATH = "/filesystem.Filesystem/ListDir"
_ODD_NAMES = (
    'quote"',
    "back\\slash",
    "tab\there",
    "new\nline",
    "ctrl\x01\x1f",
    "del\x7f",
    "é<>&",
    "emoji-\U0001f600",
    "sep\u2028",
    "space name",
)


def _expected(root: str, depth: int) -> ListDirResponse:
    """The listing built from EntryInfo messages, walked recursively here."""
    found: list[EntryInfo] = []

    def walk(real: str, shown: str, level: int) -> None:
        names = sorted(os.listdir(os.fsencode(real)))
        for name in names:
            child_real = os.path.join(os.fsencode(real), name)
            child_shown = posixpath.join(shown, os.fsdecode(name))
            st = os.lstat(child_real)
            found.append(entry_from_lstat(child_shown, st))
            if level < depth and stat.S_ISDIR(st.st_mode):
                walk(os.fsdecode(child_real), child_shown, level + 1)

    walk(os.path.realpath(root), posixpath.normpath(root), 1)
    return ListDirResponse(entries=found)


@pytest.fixture
def odd_tree(workdir: Path) -> Path:
    root = workdir / "tree"
    deep = root / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for directory in (root, root / "a", deep):
        for name in _ODD_NAMES:
            (directory / name).write_text("x" * len(name))
    with open(os.fsencode(root) + b"/bad-\xff\xfe-name", "w") as bad:
        bad.write("x")
    (root / "bad-dir-\udcff").mkdir()
    (root / "bad-dir-\udcff" / "inside").write_text("")
    big = root / "sparse"
    big.write_bytes(b"")
    os.truncate(big, 1 << 40)
    os.mkfifo(root / "fifo")
    (root / "setuid").write_text("")
    (root / "setuid").chmod(0o4755)
    (root / "sticky").mkdir()
    (root / "sticky").chmod(0o1777)
    (root / "no-perms").write_text("")
    (root / "no-perms").chmod(0)
    (root / "user-owned").write_text("")
    os.chown(root / "user-owned", 1000, 1000)
    (root / "unnamed-owner").write_text("")
    os.chown(root / "unnamed-owner", 54321, 54321)
    # Metadata: shown, not UTF-8 (skipped), other namespaces (ignored).
    (root / "with-metadata").write_text("")
    os.setxattr(root / "with-metadata", "user.e2b.key", b'va"lue\n')
    os.setxattr(root / "with-metadata", "user.e2b.empty", b"")
    os.setxattr(root / "with-metadata", "user.e2b.bad", b"\xff")
    (root / "other-xattr").write_text("")
    os.setxattr(root / "other-xattr", "user.other", b"1")
    # Symlinks: to a file, to a directory, to metadata, dangling, a loop, absolute.
    (root / "link-file").symlink_to("setuid")
    (root / "link-dir").symlink_to("a")
    (root / "link-metadata").symlink_to("with-metadata")
    (root / "dangling").symlink_to("nowhere")
    (root / "loop").symlink_to("loop")
    (root / "absolute").symlink_to(deep)
    # Timestamps: zero, before 1970, whole seconds, milli-, micro- and nanoseconds.
    for name, mtime_ns in (
        ("t-zero", 0),
        ("t-negative", -5_000_000_001),
        ("t-second", 1_700_000_000_000_000_000),
        ("t-milli", 1_700_000_000_120_000_000),
        ("t-micro", 1_700_000_000_000_001_000),
        ("t-nano", 1_700_000_000_000_000_001),
        ("t-early-nano", 1_000_000_005),
        ("t-late", 15_032_385_535_999_999_999),  # ext4's last second (year 2446)
    ):
        (root / name).write_text("")
        os.utime(root / name, ns=(mtime_ns, mtime_ns))
    (root / "empty-dir").mkdir()
    return root


def _post(envd: EnvdProcess, codec: str, body: bytes, accept: str | None) -> tuple[str, bytes]:
    """(content-encoding, the body as sent, not decompressed)."""
    headers = {"content-type": f"application/{codec}"}
    if accept is not None:
        headers["accept-encoding"] = accept
    with httpx.Client(headers={"accept-encoding": ""}, timeout=30) as client:
        request = client.build_request("POST", envd.url + _URL_PATH, content=body)
        request.headers.update(headers)
        if accept is None:
            del request.headers["accept-encoding"]
        response = client.send(request, stream=True)
        sent = b"".join(response.iter_raw())
        assert response.status_code == 200, sent
        return response.headers.get("content-encoding", "identity"), sent


@pytest.mark.parametrize("codec", ["proto", "json"])
@pytest.mark.parametrize("accept", ["gzip", None, "identity, gzip", "br, gzip", "deflate"])
def test_bytes_match_the_stock_codecs(
    envd: EnvdProcess, odd_tree: Path, codec: str, accept: str | None
) -> None:
    stock = _CODECS[codec]
    for depth in (1, 2, 4):
        # The path is not clean, so the shown paths must be cleaned as the reference does.
        root = f"{odd_tree}/./a/../"
        request = stock.encode(ListDirRequest(path=root, depth=depth))
        encoding, sent = _post(envd, codec, request, accept)
        # connectrpc answers with the first encoding it knows (gzip, identity) in the list.
        gzipped = accept is not None and accept.startswith(("gzip", "br"))
        assert encoding == ("gzip" if gzipped else "identity")
        body = gzip.decompress(sent) if gzipped else sent
        expected = _expected(root, depth)
        assert body == stock.encode(expected), depth
        assert stock.decode(body, ListDirResponse) == expected


def test_grpc_web_gets_the_same_entries(envd: EnvdProcess, odd_tree: Path) -> None:
    """gRPC-Web takes the messages path: the same entries, framed (map entries may come in
    another order there: the listing is decoded into messages and encoded again)."""
    request = proto_binary_codec().encode(ListDirRequest(path=str(odd_tree), depth=3))
    response = httpx.post(
        envd.url + _URL_PATH,
        content=b"\x00" + struct.pack(">I", len(request)) + request,
        headers={"content-type": "application/grpc-web+proto"},
        timeout=30,
    )
    assert response.status_code == 200
    flags, size = struct.unpack(">BI", response.content[:5])
    assert flags == 0
    message = proto_binary_codec().decode(response.content[5 : 5 + size], ListDirResponse)
    assert message == _expected(str(odd_tree), 3)


def test_empty_directory(envd: EnvdProcess, workdir: Path) -> None:
    for codec, empty in (("proto", b""), ("json", b"{}")):
        body = _CODECS[codec].encode(ListDirRequest(path=str(workdir)))
        encoding, sent = _post(envd, codec, body, "gzip")
        assert (encoding, gzip.decompress(sent)) == ("gzip", empty)
