"""Codecs for the process service that write output events by hand.

Streaming a child's output is nearly all data events, and the stock codecs are slow at them:
protobuf-py takes about 2 ms for a 1 MiB event (its writer grows a bytearray and re-inserts
every nested length, copying the payload about five times), and the JSON codec spends 2.2 ms
more in binascii's base64. A data event has one fixed shape, so these codecs write it directly,
copying the payload once (base64 through pybase64's SIMD encoder for JSON), and hand every
other message to the stock codecs. The bytes are exactly what protobuf-py writes; tests compare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import pybase64
from connectrpc.codec import proto_binary_codec

from envd._gen.process.process_pb import ConnectResponse, StartResponse
from envd.json_depth import DepthCheckedJSONCodec

if TYPE_CHECKING:
    from connectrpc.codec import Codec
    from protobuf import Message

# Field numbers from process.proto: {Start,Connect}Response.event = 1, ProcessEvent.data = 2,
# DataEvent.stdout/stderr/pty = 1/2/3.
_RESPONSE_EVENT: Final = 1
_EVENT_DATA: Final = 2
_OUTPUT_FIELDS: Final = {"stdout": 1, "stderr": 2, "pty": 3}
_EVENT_RESPONSES: Final = (StartResponse, ConnectResponse)
_JSON_HEADS: Final = {kind: b'{"event":{"data":{"%s":"' % kind.encode() for kind in _OUTPUT_FIELDS}


def _output(message: Message) -> tuple[str, bytes] | None:
    """(kind, bytes) when `message` is a Start or Connect response carrying a data event."""
    if type(message) not in _EVENT_RESPONSES:
        return None
    event = message.event  # type: ignore[attr-defined]  # both response types have it
    which = event.event if event is not None else None
    if which is None or which.field != "data":
        return None
    output = which.value.output
    return (output.field, output.value) if output is not None else None


def _length_prefix(field: int, size: int) -> bytes:
    """Tag and length of a length-delimited field."""
    prefix = bytearray((field << 3 | 2,))
    while size > 0x7F:
        prefix.append(size & 0x7F | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix)


class _OutputCodec:
    """A stock codec, except for data events, which `_encode_output` writes."""

    def __init__(self, stock: Codec) -> None:
        self._stock = stock

    def name(self) -> str:
        return self._stock.name()

    def encode(self, message: Message) -> bytes:
        output = _output(message)
        if output is None:
            return self._stock.encode(message)
        return self._encode_output(*output)

    def _encode_output(self, kind: str, data: bytes) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        return self._stock.decode(data, message_class)


class OutputProtoCodec(_OutputCodec):
    """Binary protobuf; data events framed by hand."""

    def __init__(self) -> None:
        super().__init__(proto_binary_codec())

    def _encode_output(self, kind: str, data: bytes) -> bytes:
        data_prefix = _length_prefix(_OUTPUT_FIELDS[kind], len(data))
        event_size = len(data_prefix) + len(data)
        event_prefix = _length_prefix(_EVENT_DATA, event_size)
        response_prefix = _length_prefix(_RESPONSE_EVENT, len(event_prefix) + event_size)
        return b"".join((response_prefix, event_prefix, data_prefix, data))


class OutputJSONCodec(_OutputCodec):
    """Protobuf JSON (requests depth-checked); data events written as
    {"event":{"data":{kind:base64}}}."""

    def __init__(self) -> None:
        super().__init__(DepthCheckedJSONCodec())

    def _encode_output(self, kind: str, data: bytes) -> bytes:
        return b"".join((_JSON_HEADS[kind], pybase64.b64encode(data), b'"}}}'))


def output_codecs() -> list[Codec]:
    return [OutputProtoCodec(), OutputJSONCodec()]
