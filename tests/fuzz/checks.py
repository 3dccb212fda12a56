"""Send one fuzzed request and judge what came back: no 5xx except a mapped Connect error, no
dropped connection, no hang, a well-formed Connect stream, a daemon still alive, and no
traceback in its log."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import httpx

from tests.envd_process import TRACEBACK_MARKER

if TYPE_CHECKING:
    from tests.envd_process import EnvdProcess
    from tests.fuzz.safety import FuzzRequest

# No request of the fuzz run needs longer; more is a hang.
REQUEST_TIMEOUT_S: Final = 10.0
CONNECT_CODES: Final = frozenset(
    {
        "canceled",
        "unknown",
        "invalid_argument",
        "deadline_exceeded",
        "not_found",
        "already_exists",
        "permission_denied",
        "resource_exhausted",
        "failed_precondition",
        "aborted",
        "out_of_range",
        "unimplemented",
        "internal",
        "unavailable",
        "data_loss",
        "unauthenticated",
    }
)
_END_STREAM: Final = 0x02
_COMPRESSED: Final = 0x01
# What the request gate (envd/gate.py) answers for an exception that no handler mapped.
_CATCH_ALL_MESSAGE: Final = "internal error"
_LOG_ALARMS: Final = (TRACEBACK_MARKER, "Exception in ASGI application", "unexpected error")


@dataclass
class Outcome:
    status: int = 0
    content_type: str = ""
    body: bytes = b""
    # Connect stream frames read (flags, payload), and whether the stream was read to its end.
    frames: list[tuple[int, bytes]] = field(default_factory=list)
    whole: bool = True
    error: str | None = None  # transport failure: dropped connection, reset, timeout


def send(client: httpx.Client, url: str, request: FuzzRequest) -> Outcome:
    outcome = Outcome()
    try:
        with client.stream(
            request.method,
            url + request.path,
            params=request.params,
            # Latin-1 bytes: what an HTTP client can put in a header (httpx encodes str as ASCII).
            headers=[(name.encode(), value.encode("latin-1")) for name, value in request.headers],
            content=request.body,
            timeout=REQUEST_TIMEOUT_S,
        ) as response:
            outcome.status = response.status_code
            outcome.content_type = response.headers.get("content-type", "")
            if outcome.content_type.startswith("application/connect+"):
                _read_frames(response, outcome, request.read_whole_stream)
            else:
                outcome.body = response.read()
    except httpx.LocalProtocolError:
        raise  # the generator made a request HTTP cannot carry: a bug of the test
    except (httpx.TransportError, httpx.DecodingError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


def _read_frames(response: httpx.Response, outcome: Outcome, whole: bool) -> None:
    buffer = b""
    for chunk in response.iter_raw():
        buffer += chunk
        while len(buffer) >= 5:
            flags, length = struct.unpack_from(">BI", buffer)
            if len(buffer) < 5 + length:
                break
            outcome.frames.append((flags, buffer[5 : 5 + length]))
            buffer = buffer[5 + length :]
            if flags & _END_STREAM:
                outcome.body = buffer
                return
            if not whole:
                outcome.whole = False
                return
    outcome.body = buffer


def verdict(outcome: Outcome) -> str | None:
    """What is wrong with this answer, or None."""
    if outcome.error is not None:
        return f"connection failed: {outcome.error}"
    if outcome.frames or outcome.content_type.startswith("application/connect+"):
        return _stream_verdict(outcome)
    if outcome.status >= 500 and not is_mapped_error(outcome.status, outcome.body):
        return f"HTTP {outcome.status} that is no mapped error: {outcome.body[:500]!r}"
    return None


def is_mapped_error(status: int, body: bytes) -> bool:
    """A Connect error, or envd's JSON error of a plain route (`code` is the status) with a
    message of its own: not the request gate's catch-all, not a bare status."""
    try:
        error = json.loads(body)
    except ValueError:
        return False
    if not isinstance(error, dict) or not isinstance(error.get("message", ""), str):
        return False
    if error.get("code") in CONNECT_CODES:
        return True
    return error.get("code") == status and error.get("message") not in ("", _CATCH_ALL_MESSAGE)


def _stream_verdict(outcome: Outcome) -> str | None:
    if outcome.status >= 500:
        return f"Connect stream answered HTTP {outcome.status}"
    if not outcome.whole:
        return None
    if not outcome.frames or not outcome.frames[-1][0] & _END_STREAM:
        return f"Connect stream cut before its end frame (after {len(outcome.frames)} frames)"
    if outcome.body:
        return f"bytes after the end frame: {outcome.body[:100]!r}"
    flags, payload = outcome.frames[-1]
    try:
        # Compressed when the request accepted gzip and the frame is large enough.
        end = json.loads(gzip.decompress(payload) if flags & _COMPRESSED else payload)
    except (ValueError, OSError, EOFError, zlib.error):
        return f"end frame is not JSON: {payload[:200]!r}"
    if not isinstance(end, dict):
        return f"end frame is no JSON object: {end!r}"
    error = end.get("error")
    if error is not None and (
        not isinstance(error, dict) or error.get("code") not in CONNECT_CODES
    ):
        return f"end frame error is no Connect error: {error!r}"
    return None


class DaemonWatch:
    """Notices a daemon's death and anything alarming in its log since the last look."""

    def __init__(self) -> None:
        self._offsets: dict[int, int] = {}
        self._reported_dead: set[int] = set()

    def problem(self, daemon: EnvdProcess) -> str | None:
        code = daemon.proc.poll()
        log = self._new_log(daemon)
        if code is not None and daemon.pid not in self._reported_dead:
            self._reported_dead.add(daemon.pid)
            return f"envd died (exit code {code}):\n{log[-3000:]}"
        for alarm in _LOG_ALARMS:
            if alarm in log:
                return f"envd logged {alarm!r}:\n{log[-6000:]}"
        return None

    def _new_log(self, daemon: EnvdProcess) -> str:
        with open(daemon.log_path, "rb") as f:
            f.seek(self._offsets.get(daemon.pid, 0))
            data = f.read()
            self._offsets[daemon.pid] = f.tell()
        return data.decode(errors="replace")
