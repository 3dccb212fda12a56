"""How a listing encoded in advance (listing.py) passes through connectrpc: EncodedListing, the
codecs and gzip that let it through unchanged, and which codec and encoding a request gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from connectrpc.codec import proto_binary_codec, proto_json_codec
from connectrpc.compression.gzip import GzipCompression

from envd._gen.filesystem.filesystem_pb import ListDirResponse
from envd.json_depth import rpc_codecs

if TYPE_CHECKING:
    from connectrpc.codec import Codec

# The codecs a listing is encoded in, by name, and the stock codec whose bytes it matches.
PROTO: Final = "proto"
JSON: Final = "json"
STOCK: Final[dict[str, Codec]] = {PROTO: proto_binary_codec(), JSON: proto_json_codec()}
# The Connect unary content types connectrpc maps to each codec (it strips parameters and case).
_CONTENT_TYPES: Final = {"application/proto": PROTO, "application/json": JSON}


class EncodedListing(bytes):
    """A ListDirResponse already encoded with `codec`; `gzipped` is the body gzipped when the
    client accepts gzip."""

    codec: str
    gzipped: bytes | None


class ListingCodec:
    """A stock codec, except that an EncodedListing passes through as it is."""

    def __init__(self, stock: Codec) -> None:
        self._stock = stock

    def name(self) -> str:
        return self._stock.name()

    def encode(self, message: Any) -> bytes:
        if not isinstance(message, EncodedListing):
            return self._stock.encode(message)
        if message.codec == self._stock.name():
            return message
        # Not reached: the codec is chosen from the same content type connectrpc reads.
        return self._stock.encode(STOCK[message.codec].decode(message, ListDirResponse))

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        return self._stock.decode(data, message_class)


def listing_codecs() -> list[Codec]:
    """The filesystem service's codecs: rpc_codecs(), passing EncodedListings through."""
    return [ListingCodec(codec) for codec in rpc_codecs()]


class ListingGzip(GzipCompression):
    """connectrpc's gzip, except that an EncodedListing's body comes already gzipped."""

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        if isinstance(data, EncodedListing) and data.gzipped is not None:
            return data.gzipped
        return super().compress(data)


def wire_codec(headers: Any) -> str | None:
    """The codec of a Connect unary request from its headers; None for anything else (gRPC-Web),
    which gets messages and the stock path."""
    content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    return _CONTENT_TYPES.get(content_type)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether connectrpc will answer gzip: the first of the client's encodings it supports
    (gzip or identity) is gzip. Only decides whether the body is gzipped in advance."""
    for token in accept_encoding.split(","):
        name = token.strip()
        if name in ("gzip", "identity"):
            return name == "gzip"
    return False
