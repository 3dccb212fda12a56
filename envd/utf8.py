"""Paths as valid UTF-8 text, for the wire (JSON bodies, protobuf strings)."""

from __future__ import annotations


def valid_utf8(text: str) -> str:
    """`text` with undecodable path bytes (surrogate escapes) shown as U+FFFD.

    File names are bytes; names that are not UTF-8 arrive surrogate-escaped, and neither JSON
    nor protobuf can carry them. Go shows them as U+FFFD in JSON and cannot send them at all
    in protobuf strings; replacing them keeps a listing usable, at the cost of not
    round-tripping such names.
    """
    if text.isascii():  # nearly every path: no copy
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
