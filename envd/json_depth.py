"""A JSON codec that refuses deeply nested bodies before protobuf-py parses them.

protobuf-py's native JSON reader recurses on the C stack for every array or object level of a
known field (and of the top-level value), and dies of SIGSEGV somewhere past 12,000 levels, taking
every stream and child process of the daemon with it. A 30 KB body gets there. So every JSON
request message is measured first, in a few linear passes over the buffer, and refused when nested deeper
than JSON_DEPTH_LIMIT.
"""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

from connectrpc.code import Code
from connectrpc.codec import proto_binary_codec, proto_json_codec
from connectrpc.errors import ConnectError

if TYPE_CHECKING:
    from connectrpc.codec import Codec

# protobuf's own limit for nested messages (binary, and message levels in protobuf-py's JSON
# reader). envd's deepest real request is 3 levels (StartRequest.process.envs), so only
# hostile or garbage bodies come near it, and it is over 100 times below the crash.
JSON_DEPTH_LIMIT: Final = 100

# Openers become 1 and closers 0xFF (-1 read as a signed byte); every other byte is dropped.
_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))


def nesting_depth(data: bytes | bytearray) -> int:
    """The deepest array/object nesting of a JSON text, brackets inside strings ignored.

    Whole-buffer operations only (no Python loop per byte or per token), so a hostile 4 MiB
    body costs about 0.1 s at worst. Escaped backslashes go first, then escaped quotes; the
    remaining quotes delimit strings, and every other piece between them is outside one.
    """
    unescaped = bytes(data).replace(b"\\\\", b"").replace(b'\\"', b"")
    outside_strings = b"".join(unescaped.split(b'"')[::2])
    steps = outside_strings.translate(_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0)


def check_depth(data: bytes | bytearray) -> None:
    """Raises ConnectError(invalid_argument) for JSON nested deeper than JSON_DEPTH_LIMIT."""
    if data.count(b"[") + data.count(b"{") <= JSON_DEPTH_LIMIT:
        return  # cannot nest deeper than it has openers: the common case, two fast counts
    if nesting_depth(data) > JSON_DEPTH_LIMIT:
        raise ConnectError(
            Code.INVALID_ARGUMENT,
            f"unmarshal message: JSON nested deeper than {JSON_DEPTH_LIMIT} levels",
        )


class DepthCheckedJSONCodec:
    """connectrpc's JSON codec, with check_depth() before every decode."""

    def __init__(self) -> None:
        self._stock = proto_json_codec()

    def name(self) -> str:
        return self._stock.name()

    def encode(self, message: Any) -> bytes:
        return self._stock.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        check_depth(data)
        return self._stock.decode(data, message_class)


def rpc_codecs() -> list[Codec]:
    """The codecs of a Connect service: binary protobuf (depth-limited by protobuf-py itself)
    and depth-checked JSON."""
    return [proto_binary_codec(), DepthCheckedJSONCodec()]
