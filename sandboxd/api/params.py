"""Path and query parameters: sandbox ids (with the legacy `id-clientid` form), integers and
times, each failure a 400 that names the parameter."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote

from sandboxd.api.errors import RequestError
from sandboxd.ids import is_sandbox_id

if TYPE_CHECKING:
    from starlette.requests import Request


def sandbox_id(request: Request) -> str:
    """The path's sandbox id; `id-clientid` (one dash) is the legacy form of `id`.

    Raises:
        RequestError: 400 `Invalid sandbox ID`.
    """
    raw: str = request.path_params["sandbox_id"]
    parts = raw.split("-")
    if len(parts) > 2 or not is_sandbox_id(parts[0]):
        raise RequestError(400, "Invalid sandbox ID")
    return parts[0]


def query_int(request: Request, name: str, minimum: int, maximum: int) -> int | None:
    """An integer query parameter within [minimum, maximum], or None when absent.

    Raises:
        RequestError: 400 naming the parameter.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw, 10)
    except ValueError:
        raise RequestError(400, f"validation error: {name}: {raw!r} is not an integer") from None
    if not minimum <= value <= maximum:
        raise RequestError(
            400, f"validation error: {name}: must be between {minimum} and {maximum}"
        )
    return value


def query_time_us(request: Request, name: str) -> int | None:
    """An RFC 3339 query parameter in µs since the epoch (truncated), or None when absent.

    Raises:
        RequestError: 400 naming the parameter.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise RequestError(400, f"validation error: {name}: {raw!r} is not RFC 3339") from None
    if when.tzinfo is None:
        raise RequestError(400, f"validation error: {name}: {raw!r} has no time zone")
    return int(when.timestamp()) * 1_000_000 + when.microsecond


def metadata_filter(request: Request) -> dict[str, str]:
    """`metadata=k1=v1&k2=v2`. The SDKs percent-encode each key and value, join the pairs as a
    query string (which encodes them again) and send that as one query value: so, as the
    reference does, the value is unescaped whole, split, and each part unescaped once more.

    Raises:
        RequestError: 400 when a pair is not `key=value`.
    """
    raw = request.query_params.get("metadata")
    if not raw:
        return {}
    pairs: dict[str, str] = {}
    for pair in unquote(raw).split("&"):
        parts = pair.split("=")
        if len(parts) != 2:
            raise RequestError(400, f"validation error: metadata: {pair!r} is not key=value")
        pairs[unquote(parts[0])] = unquote(parts[1])
    return pairs
