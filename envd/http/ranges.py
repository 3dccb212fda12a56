"""Byte ranges and conditional requests as Go's http.ServeContent evaluates them (no ETags:
envd serves files without one, so only dates and `*` can match)."""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from starlette.datastructures import Headers

NOT_MODIFIED: Final = 304
PRECONDITION_FAILED: Final = 412


class RangeError(Exception):
    """An unusable Range header (→ 416). `no_overlap` adds `Content-Range: bytes */size`."""

    def __init__(self, message: str, *, no_overlap: bool = False) -> None:
        super().__init__(message)
        self.no_overlap = no_overlap


@dataclass(frozen=True, slots=True)
class ByteRange:
    start: int
    length: int

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.start + self.length - 1}/{size}"


def http_date(timestamp: float) -> str:
    return email.utils.formatdate(int(timestamp), usegmt=True)


def _parse_date(value: str | None) -> int | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return int(parsed.timestamp())


def precondition_status(headers: Headers, mtime_s: int) -> int | None:
    """304 or 412 when a conditional header says so, else None (Go checkPreconditions)."""
    if_match = headers.get("if-match")
    if if_match is not None:
        if if_match.strip() != "*":
            return PRECONDITION_FAILED
    else:
        since = _parse_date(headers.get("if-unmodified-since"))
        if since is not None and mtime_s > since:
            return PRECONDITION_FAILED
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        return NOT_MODIFIED if if_none_match.strip() == "*" else None
    modified_since = _parse_date(headers.get("if-modified-since"))
    if modified_since is not None and mtime_s <= modified_since:
        return NOT_MODIFIED
    return None


def range_applies(headers: Headers, mtime_s: int) -> bool:
    """If-Range: the range is honoured only when the date equals the file's mtime."""
    if_range = headers.get("if-range")
    if if_range is None:
        return True
    date = _parse_date(if_range)
    return date is not None and date == mtime_s


def parse_ranges(header: str, size: int) -> list[ByteRange]:
    """Go's parseRange. Raises RangeError for malformed or wholly unsatisfiable ranges."""
    if not header:
        return []
    prefix = "bytes="
    if not header.startswith(prefix):
        raise RangeError("invalid range")
    ranges: list[ByteRange] = []
    no_overlap = False
    for spec in header[len(prefix) :].split(","):
        spec = spec.strip(" \t")
        if not spec:
            continue
        first, dash, last = spec.partition("-")
        if not dash:
            raise RangeError("invalid range")
        first, last = first.strip(" \t"), last.strip(" \t")
        if not first:
            # Suffix range: the last N bytes.
            if not last.isdigit():
                raise RangeError("invalid range")
            suffix = min(int(last), size)
            ranges.append(ByteRange(size - suffix, suffix))
            continue
        if not first.isdigit():
            raise RangeError("invalid range")
        start = int(first)
        if start >= size:
            no_overlap = True
            continue
        if not last:
            ranges.append(ByteRange(start, size - start))
            continue
        if not last.isdigit() or start > int(last):
            raise RangeError("invalid range")
        end = min(int(last), size - 1)
        ranges.append(ByteRange(start, end - start + 1))
    if no_overlap and not ranges:
        raise RangeError("invalid range: failed to overlap", no_overlap=True)
    return ranges
