"""Download headers as Go's net/http and mime packages write them: Content-Type by extension
or sniffing, Content-Disposition formatting, and envd's Accept-Encoding negotiation."""

from __future__ import annotations

import functools
import posixpath
from typing import Final
from urllib.parse import quote

# Go's built-in mime table (mime/type.go): it wins over the system database.
_GO_BUILTIN_TYPES: Final = {
    ".avif": "image/avif",
    ".css": "text/css; charset=utf-8",
    ".gif": "image/gif",
    ".htm": "text/html; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".jpeg": "image/jpeg",
    ".jpg": "image/jpeg",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".mjs": "text/javascript; charset=utf-8",
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".wasm": "application/wasm",
    ".webp": "image/webp",
    ".xml": "text/xml; charset=utf-8",
}
# Where Go's mime package looks on Linux: the shared-mime-info database first, and only
# without one the classic mime.types files (mime/type_unix.go).
_MIME_GLOBS: Final = ("/usr/local/share/mime/globs2", "/usr/share/mime/globs2")
_MIME_TYPES_FILES: Final = (
    "/etc/mime.types",
    "/etc/apache2/mime.types",
    "/etc/apache/mime.types",
    "/etc/httpd/conf/mime.types",
)

# http.DetectContentType's most common signatures (prefix → type), checked in order.
_SNIFF_SIGNATURES: Final = (
    (b"%PDF-", "application/pdf"),
    (b"%!PS-Adobe-", "application/postscript"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"\x1f\x8b\x08", "application/x-gzip"),
    (b"PK\x03\x04", "application/zip"),
    (b"Rar!\x1a\x07\x00", "application/x-rar-compressed"),
    (b"Rar!\x1a\x07\x01\x00", "application/x-rar-compressed"),
    (b"\x00asm", "application/wasm"),
    (b"OggS\x00", "application/ogg"),
    (b"\xfe\xff", "text/plain; charset=utf-16be"),
    (b"\xff\xfe", "text/plain; charset=utf-16le"),
    (b"\xef\xbb\xbf", "text/plain; charset=utf-8"),
)
_HTML_PREFIXES: Final = (
    b"<!doctype html",
    b"<html",
    b"<head",
    b"<script",
    b"<iframe",
    b"<h1",
    b"<div",
    b"<font",
    b"<table",
    b"<a",
    b"<style",
    b"<title",
    b"<b",
    b"<body",
    b"<br",
    b"<p",
    b"<!--",
)
# Bytes Go's sniffer treats as "binary data" (anything else counts as text).
_BINARY_BYTES: Final = frozenset({*range(0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)})
SNIFF_BYTES: Final = 512

_TSPECIALS: Final = frozenset('()<>@,;:\\"/[]?=')


def _with_charset(media_type: str) -> str:
    if media_type.startswith("text/") and "charset=" not in media_type:
        return f"{media_type}; charset=utf-8"
    return media_type


def _load_globs(path: str, table: dict[str, str]) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(":")
        if len(fields) < 3 or not fields[0] or fields[0].startswith("#") or len(fields[2]) < 3:
            continue
        extension = fields[2][1:]  # "*.txt" → ".txt"
        if any(c in extension for c in "?*[") or extension in table:
            continue  # only plain extensions; the file is in weight order: first wins
        table[extension] = _with_charset(fields[1])
    return True


def _load_mime_types(path: str, table: dict[str, str]) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for extension in fields[1:]:
            table["." + extension] = _with_charset(fields[0])


@functools.cache
def _system_types() -> dict[str, str]:
    """Go's extension table: built-ins, then the system database (lower-cased keys)."""
    table = dict(_GO_BUILTIN_TYPES)
    if not any(_load_globs(path, table) for path in _MIME_GLOBS):
        for path in _MIME_TYPES_FILES:
            _load_mime_types(path, table)
    return {**{k.lower(): v for k, v in table.items()}, **table}


def type_by_extension(raw_path: str) -> str | None:
    """Go's mime.TypeByExtension of the path's extension; text types get a utf-8 charset."""
    ext = posixpath.splitext(raw_path)[1]
    if not ext:
        return None
    table = _system_types()
    return table.get(ext) or table.get(ext.lower())


def sniff_content_type(head: bytes) -> str:
    """A compact http.DetectContentType: common signatures, HTML/XML, else text or binary."""
    head = head[:SNIFF_BYTES]
    for signature, media in _SNIFF_SIGNATURES:
        if head.startswith(signature):
            return media
    stripped = head.lstrip(b"\t\n\x0c\r ").lower()
    for prefix in _HTML_PREFIXES:
        if stripped.startswith(prefix) and stripped[len(prefix) : len(prefix) + 1] in (b" ", b">"):
            return "text/html; charset=utf-8"
    if stripped.startswith(b"<?xml"):
        return "text/xml; charset=utf-8"
    if any(byte in _BINARY_BYTES for byte in head):
        return "application/octet-stream"
    return "text/plain; charset=utf-8"


def _is_token(value: str) -> bool:
    return bool(value) and all(0x20 < ord(c) < 0x7F and c not in _TSPECIALS for c in value)


def content_disposition(path: str) -> str:
    """`inline; filename=…` formatted as Go's mime.FormatMediaType: a bare token when it can be,
    quoted with escapes for specials, RFC 2231 `filename*=utf-8''…` for non-ASCII names."""
    name = posixpath.basename(path.rstrip("/")) or "/"
    if any((c < " " or c > "~") and c != "\t" for c in name):
        # Go percent-encodes every byte that is not a token char, plus * ' %.
        encoded = quote(name.encode("utf-8", "surrogateescape"), safe="!#$&+-.^_`{|}~")
        return f"inline; filename*=utf-8''{encoded}"
    if _is_token(name):
        return f"inline; filename={name}"
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'inline; filename="{escaped}"'


def _parse_accept_encoding(header: str) -> list[tuple[str, float]]:
    offers: list[tuple[str, float]] = []
    for item in header.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 1.0
        offers.append((name, quality))
    return offers


def identity_rejected(offers: list[tuple[str, float]]) -> bool:
    """`identity;q=0`, or `*;q=0` without an explicit acceptable identity."""
    qualities = dict(reversed(offers))  # first mention of a name wins
    if "identity" in qualities:
        return qualities["identity"] == 0
    return qualities.get("*") == 0


class NotAcceptableError(Exception):
    """No encoding in Accept-Encoding that envd can produce."""


def negotiate_encoding(header: str) -> tuple[str, bool]:
    """The encoding to send ("gzip" or "identity") and whether identity is rejected.

    Raises:
        NotAcceptableError: nothing acceptable (→ 406).
    """
    offers = _parse_accept_encoding(header)
    rejected = identity_rejected(offers)
    for name, quality in sorted(offers, key=lambda offer: -offer[1]):
        if quality <= 0:
            continue
        if name == "identity":
            return "identity", rejected
        if name == "*":
            return ("gzip" if rejected else "identity"), rejected
        if name == "gzip":
            return "gzip", rejected
    if rejected:
        raise NotAcceptableError
    return "identity", rejected
