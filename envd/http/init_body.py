"""The POST /init body, decoded as the reference envd's Go structs decode it: field names match
case-insensitively, `null` means absent, a wrong JSON type rejects the whole body, unknown
fields are ignored, and the access token must be a plain non-empty string."""

from __future__ import annotations

import calendar
import json
import re
from dataclasses import dataclass
from datetime import datetime
from json.decoder import scanstring  # type: ignore[attr-defined]  # public at run time, not in typeshed
from json.scanner import py_make_scanner  # type: ignore[attr-defined]  # likewise
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class InitRequest:
    env_vars: dict[str, str] | None = None
    access_token: str | None = None
    timestamp_ns: int | None = None
    default_user: str | None = None
    default_workdir: str | None = None


class _EscapedStr(str):
    """A decoded JSON string whose source text contained a backslash escape."""

    __slots__ = ()


def _scan_string(s: str, end: int, strict: bool) -> tuple[str, int]:
    value, new_end = scanstring(s, end, strict)
    return (_EscapedStr(value) if "\\" in s[end:new_end] else value), new_end


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # Python accepts NaN and Infinity; Go does not


class _Decoder(json.JSONDecoder):
    """Standard JSON, except that string values remember whether they were escaped (the
    reference's token type reads its raw JSON and refuses backslashes)."""

    def __init__(self) -> None:
        super().__init__(parse_constant=_reject_constant)
        self.parse_string = _scan_string
        self.scan_once = py_make_scanner(self)


_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def parse_rfc3339_ns(text: str) -> int:
    """An RFC 3339 timestamp (Go's time.Time JSON form) as Unix nanoseconds.

    Raises:
        ValueError: not RFC 3339, or out of range.
    """
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError("timestamp is not RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    datetime(year, month, day, hour, minute, second)  # range check (no 24:00, no leap second)
    fraction, zulu, sign, off_hours, off_minutes = m.groups()[6:]
    offset_s = 0
    if not zulu:
        if int(off_hours) > 23 or int(off_minutes) > 59:
            raise ValueError("timestamp offset out of range")
        offset_s = (int(off_hours) * 60 + int(off_minutes)) * 60 * (1 if sign == "+" else -1)
    seconds = calendar.timegm((year, month, day, hour, minute, second)) - offset_s
    nanos = int((fraction or "0")[:9].ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos


def _string(value: object, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{field} is not a string")


def _env_vars(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("envVars is not an object")
    env: dict[str, str] = {}
    for key, item in value.items():
        # Go decodes a null map value as the zero value, "".
        env[key] = _string(item, "an envVars value") or ""
    return env


def _access_token(value: object) -> str | None:
    token = _string(value, "accessToken")
    if token is not None and (not token or isinstance(token, _EscapedStr)):
        raise ValueError("accessToken must be a non-empty string without escapes")
    return token


# Fields a standalone daemon accepts but does not act on: only their JSON types are checked.
_IGNORED_STRINGS: Final = frozenset({"hyperloopip", "cabundle", "lifecycleid"})


def _fields(body: bytes) -> dict[str, Any]:
    """The known top-level fields, keyed by lower-case name (the last duplicate wins, as in Go)."""
    if not body:
        return {}
    try:
        document = _Decoder().decode(body.decode())
    except RecursionError:  # the pure-Python scanner recurses once per nesting level
        raise ValueError("body nested too deeply") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise TypeError("body is not a JSON object")
    return {key.lower(): value for key, value in document.items()}


def parse_init_body(body: bytes) -> InitRequest:
    """Decode a POST /init body (empty means no fields).

    Raises:
        ValueError: malformed JSON or a bad value (the reference answers 400).
        TypeError: a field of the wrong JSON type (likewise 400).
    """
    fields = _fields(body)
    for name in _IGNORED_STRINGS:
        _string(fields.get(name), name)
    if not isinstance(fields.get("volumemounts"), list | None):
        raise TypeError("volumeMounts is not an array")
    timestamp = _string(fields.get("timestamp"), "timestamp")
    return InitRequest(
        env_vars=_env_vars(fields.get("envvars")),
        access_token=_access_token(fields.get("accesstoken")),
        timestamp_ns=None if timestamp is None else parse_rfc3339_ns(timestamp),
        default_user=_string(fields.get("defaultuser"), "defaultUser"),
        default_workdir=_string(fields.get("defaultworkdir"), "defaultWorkdir"),
    )
