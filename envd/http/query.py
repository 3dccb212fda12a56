"""The query string of a /files request, read as Starlette's `request.query_params` reads it
(blank values kept, `+` a space, percent-escapes decoded as UTF-8 with replacement, the last
of repeated names wins) at a fraction of its cost: parse_qsl's generic str handling and the
multidict built around it were a noticeable part of a small upload's CPU."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote_to_bytes


def parse_query(raw: bytes) -> dict[str, str]:
    """{name: value} of a raw query string (the ASGI scope's `query_string`)."""
    if not raw.isascii():
        # Rare (clients percent-encode): bytes beyond ASCII are read as Latin-1, as Starlette
        # does, which only parse_qsl's str handling reproduces.
        return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
    params: dict[str, str] = {}
    for pair in raw.split(b"&"):
        if pair:
            name, _, value = pair.partition(b"=")
            params[_decode(name)] = _decode(value)
    return params


def _decode(part: bytes) -> str:
    if b"+" in part:
        part = part.replace(b"+", b" ")
    if b"%" in part:
        # Clients escape every "/" of a path: one replace spares unquote_to_bytes's loop over
        # them (a "/" can never complete another escape, so the result is the same).
        part = part.replace(b"%2F", b"/")
        if b"%" in part:
            part = unquote_to_bytes(part)
    return part.decode("utf-8", "replace")
