"""The last gate before a fuzzed request leaves: it reads the request every way the daemon could
(each route's parser, both Connect codecs, gzip and envelopes or not) and refuses it if any
reading names a path outside the sandbox, a real user other than the throwaway one, or a command
other than the fixed harmless ones. The strategies are written to stay inside; this makes sure.
"""

from __future__ import annotations

import base64
import contextlib
import json
import posixpath
import pwd
import re
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from envd._gen.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    ListDirRequest,
    MakeDirRequest,
    MoveRequest,
    RemoveRequest,
    StatRequest,
    WatchDirRequest,
)
from envd._gen.process.process_pb import StartRequest
from envd.http.init_body import parse_init_body
from envd.http.multipart_parts import part_filename
from envd.json_depth import nesting_depth
from envd.users import User, basic_auth_username, expand_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from protobuf import Message

    from tests.fuzz.sandbox import Sandbox

# The only commands Start may run, with the only argument lists ("" fails to start; `cat`
# runs until its stdin closes or it is signalled).
FIXED_COMMANDS: Final = frozenset({"", "true", "echo", "cat"})
FIXED_ARGS: Final = (("hi",), ("-n", "a b"), ())
# Deeper bodies are not decoded here (protobuf-py's JSON parser crashes on very deep ones): the
# deep-nesting strategy builds them from brackets and one "d" key only.
MAX_DECODED_DEPTH: Final = 200
_DEEP_ALPHABET: Final = re.compile(rb'[\[\]{}",:d0-9 ]*')
_PATH_MESSAGES: Final = (
    MoveRequest,
    MakeDirRequest,
    RemoveRequest,
    StatRequest,
    ListDirRequest,
    WatchDirRequest,
    CreateWatcherRequest,
    StartRequest,
)
_DISPOSITION: Final = re.compile(rb"content-disposition\s*:([^\r\n]*)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class FuzzRequest:
    method: str
    path: str  # the URL path, percent-encoded as it is sent
    params: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    # A Connect stream response is read to its end, or only up to its first message (WatchDir
    # runs until cancelled).
    read_whole_stream: bool = True


class Confinement:
    """What the sandbox allows, as the daemon will resolve it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.username = sandbox.username
        self.roots = sandbox.roots
        self._user = User(sandbox.username, sandbox.uid, sandbox.gid, (sandbox.gid,), self.roots[0])

    def path_ok(self, path: str) -> bool:
        """Inside home/ or scratch/ after resolution and normalisation. "" is the default
        workdir, itself only ever set to a confined path; what the daemon refuses is fine."""
        if not path:
            return True
        try:
            resolved = expand_path(path, self._user, None)
        except ValueError:
            return True
        normal = posixpath.normpath(resolved)
        return any(normal == root or normal.startswith(root + "/") for root in self.roots)

    def user_ok(self, name: str) -> bool:
        """The throwaway user, the default (""), or nobody at all."""
        if name in ("", self.username):
            return True
        try:
            pwd.getpwnam(name)
        except (KeyError, ValueError):
            return True
        return False

    def problem(self, request: FuzzRequest) -> str | None:
        """Why this request may not be sent, or None."""
        for problem in self._param_problems(request):
            return problem
        for name, value in request.headers:
            if name.lower() == "authorization":
                user = basic_auth_username(value)
                if user is not None and not self.user_ok(user):
                    return f"Basic-auth user {user!r}"
        for payload in _payloads(request.body):
            found = self._payload_problem(payload)
            if found is not None:
                return found
        return None

    def _param_problems(self, request: FuzzRequest) -> Iterator[str]:
        for key, value in request.params:
            if key == "path" and not self.path_ok(value):
                yield f"path parameter {value!r}"
            if key == "username" and not self.user_ok(value):
                yield f"username parameter {value!r}"
            if key == "message":  # a Connect GET request
                candidates = [value.encode("utf-8", "surrogateescape")]
                with contextlib.suppress(ValueError):
                    candidates.append(base64.urlsafe_b64decode(value + "==="))
                for candidate in candidates:
                    for payload in _payloads(candidate):
                        problem = self._payload_problem(payload)
                        if problem is not None:
                            yield problem

    def _payload_problem(self, payload: bytes) -> str | None:
        deep = nesting_depth(payload) > MAX_DECODED_DEPTH
        if deep and payload.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"[", b"{")):
            if _DEEP_ALPHABET.fullmatch(payload):
                return None
            return "a deeply nested JSON body with more than brackets in it"
        for message in _decoded_messages(payload, json=not deep):
            problem = self._message_problem(message)
            if problem is not None:
                return problem
        if deep:  # no JSON parser gets past its first byte
            return self._parts(payload)
        return self._compose_problem(payload) or self._init_problem(payload) or self._parts(payload)

    def _message_problem(self, message: Message[Any]) -> str | None:
        for name in ("path", "source", "destination"):
            value = getattr(message, name, None)
            if isinstance(value, str) and not self.path_ok(value):
                return f"{type(message).__name__}.{name} {value!r}"
        if isinstance(message, StartRequest) and message.process is not None:
            config = message.process
            if config.cmd not in FIXED_COMMANDS or tuple(config.args) not in FIXED_ARGS:
                return f"Start of {config.cmd!r} {list(config.args)!r}"
            if not self.path_ok(config.cwd):
                return f"Start in {config.cwd!r}"
        return None

    def _compose_problem(self, payload: bytes) -> str | None:
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        sources = data.get("source_paths")
        paths = [*(sources if isinstance(sources, list) else []), data.get("destination")]
        for path in paths:
            if isinstance(path, str) and not self.path_ok(path):
                return f"compose path {path!r}"
        username = data.get("username")
        if isinstance(username, str) and not self.user_ok(username):
            return f"compose username {username!r}"
        return None

    def _init_problem(self, payload: bytes) -> str | None:
        try:
            init = parse_init_body(payload)
        except (ValueError, TypeError, RecursionError):
            return None
        if init.default_user and not self.user_ok(init.default_user):
            return f"/init defaultUser {init.default_user!r}"
        if init.default_workdir and not self.path_ok(init.default_workdir):
            return f"/init defaultWorkdir {init.default_workdir!r}"
        return None

    def _parts(self, payload: bytes) -> str | None:
        for match in _DISPOSITION.finditer(payload):
            is_file, filename = part_filename({"content-disposition": match.group(1).strip()})
            if is_file and filename is not None and not self.path_ok(filename):
                return f"multipart filename {filename!r}"
        return None


def _decoded_messages(payload: bytes, *, json: bool) -> Iterator[Message[Any]]:
    """Every message the payload decodes to, in the binary codec and (`json`) the JSON one."""
    for message_class in _PATH_MESSAGES:
        if json:
            with contextlib.suppress(Exception):  # undecodable: the daemon refuses it too
                yield message_class.from_json(payload, ignore_unknown_fields=True)
        with contextlib.suppress(Exception):
            yield message_class.from_binary(payload)


def _payloads(body: bytes) -> Iterator[bytes]:
    """The body as it is, inflated, and each Connect envelope in it (inflated or not)."""
    for whole in (body, _gunzip(body)):
        if whole is None:
            continue
        yield whole
        for message in _envelopes(whole):
            yield message
            inflated = _gunzip(message)
            if inflated is not None:
                yield inflated


def _gunzip(data: bytes) -> bytes | None:
    """Every gzip member inflated, as the daemon's readers do; None if it is not gzip."""
    out = b""
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += inflater.decompress(data, 1 << 24)
            if not inflater.eof:
                break
            data = inflater.unused_data
    except zlib.error:
        return out or None
    return out or None


def _envelopes(body: bytes) -> Iterator[bytes]:
    """Connect envelopes (flags byte, 4-byte big-endian length), including a truncated last
    one, as a lenient reader might take it."""
    offset = 0
    while offset + 5 <= len(body):
        (length,) = struct.unpack_from(">I", body, offset + 1)
        yield body[offset + 5 : offset + 5 + length]
        offset += 5 + length
