"""A multipart/form-data body as a list of part events for the upload loop (envd/http/upload.py):
python-multipart's incremental parser behind callbacks that queue them, the same events split
in one pass from a small body that arrived whole, and the filename of a `file` part."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import (
    DEFAULT_MAX_HEADER_COUNT,
    DEFAULT_MAX_HEADER_SIZE,
    TOKEN_CHARS,
    MultipartParser,
    parse_options_header,
)

from envd.errors import EnvdHTTPError

# Bound on one part's headers, as Go's multipart reader has (it allows 10 MiB).
PART_HEADERS_MAX_BYTES: Final = 1024 * 1024

# A part's headers when it begins, a piece of its data, None when it ends.
Event = dict[str, bytes] | memoryview | None


class PartEvents:
    """python-multipart callbacks that queue part boundaries and data, so the async upload
    loop can open files (in a thread) and write between two parser.write() calls."""

    def __init__(self) -> None:
        # A part's headers (dict) when it begins, its data, None when it ends.
        self.events: list[Event] = []
        # The chunk being parsed: data inside it is passed on without a copy.
        self.chunk = b""
        self.finished = False
        self._headers: dict[str, bytes] = {}
        self._field = b""
        self._value = b""
        self._header_bytes = 0

    def parser(self, boundary: bytes) -> MultipartParser:
        return MultipartParser(
            boundary,
            max_header_count=DEFAULT_MAX_HEADER_COUNT,  # the limits whole_body_events keeps
            max_header_size=DEFAULT_MAX_HEADER_SIZE,
            callbacks={
                "on_part_begin": self._begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },
        )

    def _begin(self) -> None:
        self._headers = {}
        self._header_bytes = 0

    def _count_header_bytes(self, count: int) -> None:
        self._header_bytes += count
        if self._header_bytes > PART_HEADERS_MAX_BYTES:
            raise MultipartParseError("part headers too large")

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers.setdefault(self._field.decode("latin-1").lower(), self._value)
        self._field, self._value = b"", b""

    def _headers_finished(self) -> None:
        self.events.append(self._headers)

    def _data(self, data: bytes, start: int, end: int) -> None:
        if data is self.chunk:
            self.events.append(memoryview(data)[start:end])
        else:  # the parser's own look-behind buffer, which it reuses: copy
            self.events.append(memoryview(bytes(data[start:end])))

    def _part_end(self) -> None:
        self.events.append(None)

    def _end(self) -> None:
        self.finished = True


def whole_body_events(chunk: bytes, boundary: bytes) -> list[Event] | None:
    """The events PartEvents would queue for `chunk` when it holds a whole multipart body in
    its plain form (opening delimiter first, header lines `Name: value`, delimiters followed by
    CRLF, a closing delimiter), else None: python-multipart then parses it as before.

    A small body is gathered into one chunk (upload.py's _gather); python-multipart's parser,
    pure Python, costs more than the rest of such an upload. Anything unusual (preamble,
    transport padding, a delimiter look-alike in the data, a bad or oversized header, a cut
    body) is left to python-multipart, so errors and their messages stay its own
    (tests/http/test_files_multipart_paths.py feeds the same bodies to both paths).
    """
    opening = b"--" + boundary + b"\r\n"
    if not chunk.startswith(opening):
        return None
    delimiter = b"\r\n--" + boundary
    view = memoryview(chunk)
    events: list[Event] = []
    pos = len(opening)
    while True:
        headers: dict[str, bytes] = {}
        count = 0
        while not chunk.startswith(b"\r\n", pos):
            end = chunk.find(b"\r\n", pos)
            # python-multipart refuses a line over its size limit, and a ninth header.
            if (
                end == -1
                or end - pos >= DEFAULT_MAX_HEADER_SIZE
                or count == DEFAULT_MAX_HEADER_COUNT
            ):
                return None
            field, colon, value = chunk[pos:end].partition(b":")
            if not colon or not field or field.translate(None, TOKEN_CHARS) or b"\r" in value:
                return None
            headers.setdefault(field.decode("latin-1").lower(), value.lstrip(b" "))
            count += 1
            pos = end + 2
        events.append(headers)
        start = pos + 2
        end = chunk.find(delimiter, start)
        if end == -1:
            return None
        if end > start:
            events.append(view[start:end])
        events.append(None)
        pos = end + len(delimiter)
        if chunk.startswith(b"--", pos):
            return events  # python-multipart ignores what follows the closing delimiter
        if not chunk.startswith(b"\r\n", pos):
            return None
        pos += 2


# RFC 2231 `filename*=charset'language'percent-encoded`, which Go's mime.ParseMediaType
# decodes and prefers over a plain `filename`.
_EXTENDED_FILENAME: Final = re.compile(
    r"""(?:^|;)\s*filename\*\s*=\s*([^';]*)'[^']*'([^;\s]*)""", re.IGNORECASE
)


def part_filename(headers: dict[str, bytes]) -> tuple[bool, str | None]:
    """(is a `file` part, its filename taken verbatim, directories included)."""
    disposition = headers.get("content-disposition", b"").decode("latin-1")
    _, options = parse_options_header(disposition)
    if options.get(b"name") != b"file":
        return False, None
    # Without a `*` there is no extended parameter, and the test costs less than the search.
    extended = _EXTENDED_FILENAME.search(disposition) if "*" in disposition else None
    if extended:
        charset = extended.group(1) or "utf-8"
        try:
            return True, unquote(extended.group(2), encoding=charset, errors="strict")
        except (LookupError, UnicodeDecodeError):
            pass  # undecodable: fall back to the plain parameter, as Go does
    filename = options.get(b"filename")
    # Header bytes are UTF-8 on the wire; undecodable bytes survive as surrogates.
    return True, None if filename is None else filename.decode("utf-8", "surrogateescape")


def new_parser(parts: PartEvents, boundary: bytes) -> MultipartParser:
    """python-multipart's parser feeding `parts`; a boundary it refuses is a 400."""
    try:
        return parts.parser(boundary)
    except FormParserError as exc:  # a boundary over python-multipart's 256-byte limit
        raise EnvdHTTPError(400, f"error parsing multipart body: {exc}") from exc
