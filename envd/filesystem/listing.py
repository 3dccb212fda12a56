"""ListDir written straight to the wire, in the worker thread that walks the tree.

Building one EntryInfo and Timestamp message per entry and letting connectrpc encode and gzip
the response on the event loop cost over twice the walk itself for 10,000 entries, and held
the loop for tens of milliseconds. Here the walk writes each entry's protobuf or JSON bytes
directly, and gzips the body when the client accepts gzip, all off the loop; the response
reaches connectrpc as an `EncodedListing` (bytes) that `ListingCodec` and `ListingGzip` pass
through. The fields every entry shares with many others (type, mode, permissions, owner, group)
are encoded once per distinct (st_mode, uid, gid) by the stock codecs themselves; what the
hand-written part writes is the name, path, size and modification time. Entries that are
symlinks, carry `user.e2b.*` metadata or were modified before 1970 are rare and go through
entries.entry_from_lstat and the stock codecs. The bytes are the stock codecs' bytes;
tests/filesystem/test_list_dir_wire.py compares them over the wire. The walk itself is
listing_walk.py; what lets the bytes through connectrpc is listing_codecs.py.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
import time
from typing import Final

from isal import isal_zlib

from envd._gen.filesystem.filesystem_pb import EntryInfo, ListDirResponse
from envd.filesystem import entries
from envd.filesystem.listing_codecs import JSON, PROTO, STOCK, EncodedListing
from envd.filesystem.listing_walk import walk
from envd.metadata import XATTR_PREFIX
from envd.users import group_name, owner_name

# RFC 3339 (protobuf JSON's Timestamp) covers years 1 to 9999; written by hand, 1970 to 9999
# (earlier times have negative seconds; later ones the stock codec refuses, as before).
_LAST_RFC3339_NS: Final = 253_402_300_799_999_999_999
# Characters JSON strings escape (protobuf-py escapes exactly these, as json.dumps does).
_JSON_ESCAPED: Final = re.compile(rb'["\\\x00-\x1f]')
# igzip's level 1: for 10,000 entries 0.3-0.4 ms and 55-65 KiB, where the level 3 GET /files
# uses takes 1.6-2.5 ms for as much or more (listings repeat themselves more than files do).
_GZIP_LEVEL: Final = 1
_GZIP_WBITS: Final = 16 + isal_zlib.MAX_WBITS  # a gzip member
_ONE_BYTE_VARINTS: Final = [bytes((n,)) for n in range(0x80)]


def _varint(n: int) -> bytes:
    """A protobuf varint, unrolled up to the five bytes of a nanosecond count or a 2026 time."""
    if 0 <= n < 0x80:
        return _ONE_BYTE_VARINTS[n]
    n &= 0xFFFF_FFFF_FFFF_FFFF  # int64: negative values take ten bytes, two's complement
    if n < 1 << 14:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 1 << 21:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    if n < 1 << 28:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21))
    if n < 1 << 35:
        return bytes(
            (
                n & 0x7F | 0x80,
                n >> 7 & 0x7F | 0x80,
                n >> 14 & 0x7F | 0x80,
                n >> 21 & 0x7F | 0x80,
                n >> 28,
            )
        )
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _utf8(raw: bytes) -> bytes:
    """Path bytes as valid UTF-8 (as valid_utf8 shows them: undecodable bytes as U+FFFD)."""
    if raw.isascii():
        return raw
    return raw.decode("utf-8", "replace").encode()


def _json_inner(text: bytes) -> bytes:
    """Valid UTF-8 as the inside of a JSON string, escaped as protobuf-py escapes it."""
    if _JSON_ESCAPED.search(text) is None:
        return text
    return json.dumps(text.decode(), ensure_ascii=False).encode()[1:-1]


def _plain(mode: int, mtime_ns: int, real: bytes) -> bool:
    """Whether the entry is written by hand: not a symlink, a modification time RFC 3339 can
    show, and no `user.e2b.*` metadata."""
    if stat.S_ISLNK(mode) or not 0 <= mtime_ns <= _LAST_RFC3339_NS:
        return False
    try:
        names = os.listxattr(real)
    except OSError:  # no xattrs on this filesystem, or gone: none, as read_metadata says
        return True
    return not names or not any(name.startswith(XATTR_PREFIX) for name in names)


class _Encoder:
    """The walk, written as one codec's entries: `entry` writes the common ones by hand, and
    the rest are the stock codec's EntryInfo, put in the form `item` gives them."""

    def __init__(self, codec: str) -> None:
        self._stock = STOCK[codec]
        # The encoded type, and mode to group fields, of one (st_mode, uid, gid).
        self._shared: dict[tuple[int, int, int], tuple[bytes, bytes]] = {}
        # The modification time's whole seconds, encoded: files made together share them.
        self._seconds: dict[int, bytes] = {}

    def entries(self, root: str, depth: int) -> list[bytes]:
        items: list[bytes] = []
        shared = self._shared
        # Encoded modification times: files written together often share one (file systems
        # stamp them with a coarse clock; archives and copies set them whole).
        stamps: dict[int, bytes] = {}
        for shown_dir, run in walk(root, depth):
            shown_b = posixpath.join(shown_dir, "").encode("utf-8", "surrogateescape")
            prefix = self.text(_utf8(shown_b))
            for name, st, real in run:
                mode, mtime_ns = st.st_mode, st.st_mtime_ns
                if not _plain(mode, mtime_ns, real):
                    shown = posixpath.join(shown_dir, name.decode("utf-8", "surrogateescape"))
                    entry = self._stock.encode(entries.entry_from_lstat(shown, st))
                    items.append(self.item(entry))
                    continue
                key = (mode, st.st_uid, st.st_gid)
                parts = shared.get(key)
                if parts is None:
                    parts = shared[key] = self._encode_shared(*key)
                stamp = stamps.get(mtime_ns)
                if stamp is None:
                    stamp = stamps[mtime_ns] = self._timestamp(mtime_ns)
                name = self.text(name if name.isascii() else _utf8(name))
                items.append(self.entry(prefix, name, st.st_size, stamp, *parts))
        return items

    def _encode_shared(self, mode: int, uid: int, gid: int) -> tuple[bytes, bytes]:
        """(type field, mode to group fields) of entries that are not symlinks (their type and
        mode come from the target), by the stock codec."""
        kind = EntryInfo(type=entries.file_type(mode))
        rest = EntryInfo(
            mode=mode & 0o777,
            permissions=entries.go_permissions(mode),
            owner=owner_name(uid),
            group=group_name(gid),
        )
        return self.fields(self._stock.encode(kind)), self.fields(self._stock.encode(rest))

    def _timestamp(self, mtime_ns: int) -> bytes:
        """modified_time, omitted when zero."""
        if not mtime_ns:
            return b""
        seconds, nanos = divmod(mtime_ns, 1_000_000_000)
        whole = self._seconds.get(seconds)
        if whole is None:
            whole = self._seconds[seconds] = self.seconds(seconds)
        return self.timestamp(whole, nanos)

    def seconds(self, seconds: int) -> bytes:
        """The whole seconds of modified_time, as `timestamp` takes them."""
        raise NotImplementedError

    def timestamp(self, seconds: bytes, nanos: int) -> bytes:
        """modified_time from its encoded seconds and its nanoseconds."""
        raise NotImplementedError

    def fields(self, message: bytes) -> bytes:
        """The fields of an encoded message, to splice into an entry."""
        raise NotImplementedError

    def text(self, utf8: bytes) -> bytes:
        """Valid UTF-8 as the codec writes a string's content."""
        raise NotImplementedError

    def item(self, entry: bytes) -> bytes:
        """An encoded EntryInfo as one item of the response's entries."""
        raise NotImplementedError

    def entry(
        self, prefix: bytes, name: bytes, size: int, stamp: bytes, kind: bytes, rest: bytes
    ) -> bytes:
        """One item of a plain entry: `prefix` + `name` is its path, `stamp` its encoded
        modification time."""
        raise NotImplementedError


class _ProtoEncoder(_Encoder):
    def __init__(self) -> None:
        super().__init__(PROTO)

    def fields(self, message: bytes) -> bytes:
        return message

    def text(self, utf8: bytes) -> bytes:
        return utf8

    def item(self, entry: bytes) -> bytes:
        return b"\n" + _varint(len(entry)) + entry

    def entry(
        self, prefix: bytes, name: bytes, size: int, stamp: bytes, kind: bytes, rest: bytes
    ) -> bytes:
        varint = _varint
        path = prefix + name
        body = b"".join(
            (
                b"\n",
                varint(len(name)),
                name,
                kind,
                b"\x1a",
                varint(len(path)),
                path,
                b" " + varint(size) if size else b"",
                rest,
                stamp,
            )
        )
        return b"\n" + varint(len(body)) + body

    def seconds(self, seconds: int) -> bytes:
        return b"\x08" + _varint(seconds) if seconds else b""

    def timestamp(self, seconds: bytes, nanos: int) -> bytes:
        fields = seconds + b"\x10" + _varint(nanos) if nanos else seconds
        return b"J" + _ONE_BYTE_VARINTS[len(fields)] + fields  # at most 13 bytes


class _JSONEncoder(_Encoder):
    def __init__(self) -> None:
        super().__init__(JSON)
        self._days: dict[int, bytes] = {}  # modifiedTime up to the time of day

    def fields(self, message: bytes) -> bytes:
        """`{"type":"FILE_TYPE_FILE"}` as `,"type":"FILE_TYPE_FILE"`; `{}` as nothing."""
        members = message[1:-1]
        return b"," + members if members else b""

    def text(self, utf8: bytes) -> bytes:
        return _json_inner(utf8)

    def item(self, entry: bytes) -> bytes:
        return entry

    def seconds(self, seconds: int) -> bytes:
        day, second = divmod(seconds, 86_400)
        date = self._days.get(day)
        if date is None:
            date = self._days[day] = time.strftime(
                ',"modifiedTime":"%Y-%m-%dT', time.gmtime(day * 86_400)
            ).encode()
        return date + b"%02d:%02d:%02d" % (second // 3600, second // 60 % 60, second % 60)

    def timestamp(self, seconds: bytes, nanos: int) -> bytes:
        return seconds + _fraction(nanos) + b'Z"'

    def entry(
        self, prefix: bytes, name: bytes, size: int, stamp: bytes, kind: bytes, rest: bytes
    ) -> bytes:
        return b"".join(
            (
                b'{"name":"',
                name,
                b'"',
                kind,
                b',"path":"',
                prefix,
                name,
                b'"',
                b',"size":"%d"' % size if size else b"",
                rest,
                stamp,
                b"}",
            )
        )


def encode_listing(root: str, depth: int, codec: str, gzip: bool) -> EncodedListing:
    """ListDirResponse of `root` down to `depth` levels, encoded with `codec` (and gzipped too
    when `gzip`). Blocking: run in a worker thread.

    Raises:
        OSError, RootNotADirectoryError: as listing_walk.walk.
    """
    if codec == PROTO:
        body = b"".join(_ProtoEncoder().entries(root, depth))
    else:
        items = _JSONEncoder().entries(root, depth)
        body = b'{"entries":[' + b",".join(items) + b"]}" if items else b"{}"
    listing = EncodedListing(body)
    listing.codec = codec
    listing.gzipped = None
    if gzip:
        compressor = isal_zlib.compressobj(_GZIP_LEVEL, isal_zlib.DEFLATED, _GZIP_WBITS)
        listing.gzipped = compressor.compress(body) + compressor.flush()
    return listing


def _fraction(nanos: int) -> bytes:
    """Protobuf JSON's fraction of a second: none, or 3, 6 or 9 digits."""
    if not nanos:
        return b""
    if not nanos % 1_000_000:
        return b".%03d" % (nanos // 1_000_000)
    if not nanos % 1_000:
        return b".%06d" % (nanos // 1_000)
    return b".%09d" % nanos


def list_dir(root: str, depth: int) -> ListDirResponse:
    """The listing as a message, for clients the encoded path does not serve (gRPC-Web, the
    legacy SDK's reduced entries). Blocking: run in a worker thread."""
    response: ListDirResponse = STOCK[PROTO].decode(
        encode_listing(root, depth, PROTO, gzip=False), ListDirResponse
    )
    return response
