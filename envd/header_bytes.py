"""Request headers as raw bytes.

first_values() and text(): the few headers a hot path reads, in one scan of the ASGI list
(Starlette's Headers scans the whole list again, lowercasing, for every lookup).

Utf8HeaderValues: connectrpc decodes every request header value as strict UTF-8 and fails the
whole call (a 500 and a logged traceback) on any other byte. HTTP allows such bytes
(obs-text) and the reference passes them through, so the Connect services get those values
re-encoded from Latin-1, the way Starlette reads every header."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from starlette.types import ASGIApp, Receive, Scope, Send


def first_values(raw: Iterable[tuple[bytes, bytes]], names: frozenset[bytes]) -> dict[bytes, bytes]:
    """The first value of each header in `names` that the request has (ASGI names arrive
    lowercased)."""
    found: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in names and name not in found:
            found[name] = value
    return found


def text(value: bytes | None) -> str | None:
    """A raw header value as Starlette reads headers (Latin-1), None for a missing one."""
    return None if value is None else value.decode("latin-1")


class Utf8HeaderValues:
    """ASGI wrapper for a Connect application: header values that are not UTF-8 arrive as the
    UTF-8 encoding of their Latin-1 reading; all others (almost always ASCII) untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", ())
        if not all(value.isascii() for _, value in headers):  # the hot path stays a scan
            scope = {**scope, "headers": [(name, _as_utf8(value)) for name, value in headers]}
        await self.app(scope, receive, send)


def _as_utf8(value: bytes) -> bytes:
    try:
        value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1").encode()
    return value
