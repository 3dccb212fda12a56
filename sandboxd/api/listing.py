"""GET /v2/sandboxes: filters, the order (startedAt, then id) and the opaque page token."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.api import params
from sandboxd.api.errors import RequestError

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.node.models import SandboxInfo

STATES = ("running", "paused")
MAX_LIMIT = 100


@dataclass(frozen=True)
class Query:
    states: tuple[str, ...]
    metadata: dict[str, str]
    ascending: bool
    started_after_us: int | None
    template: str | None
    limit: int
    after: tuple[int, str] | None  # the sort key of the previous page's last item


def parse(request: Request) -> Query:
    """The list query of `request`.

    Raises:
        RequestError: 400 naming the bad parameter, or `Invalid next token`.
    """
    states = tuple(s for s in request.query_params.get("state", "").split(",") if s) or STATES
    if bad := [s for s in states if s not in STATES]:
        raise RequestError(400, f"validation error: state: {bad[0]!r} is not running or paused")
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(400, f"validation error: order: {order!r} is not asc or desc")
    template = request.query_params.get("template") or None
    if template is not None and ":" in template:
        raise RequestError(400, "validation error: template: tags are not supported here")
    limit = params.query_int(request, "limit", 1, MAX_LIMIT) or MAX_LIMIT
    token = request.query_params.get("nextToken")
    after = None if not token else decode_token(token, order == "asc")
    return Query(states, params.metadata_filter(request), order == "asc",
                 params.query_time_us(request, "startedAfter"), template, limit, after)  # fmt: skip


def encode_token(key: tuple[int, str], ascending: bool) -> str:
    text = f"{key[0]}__{key[1]}" + ("__asc" if ascending else "")
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode_token(token: str, ascending: bool) -> tuple[int, str]:
    """Raises RequestError 400 for a malformed token or one of the other order."""
    try:
        parts = base64.urlsafe_b64decode(token.encode()).decode().split("__")
        if (len(parts) == 3) != ascending or (ascending and parts[2] != "asc"):
            raise ValueError("another order's token")
        return int(parts[0]), parts[1]
    except (ValueError, binascii.Error, IndexError):
        raise RequestError(400, "Invalid next token") from None


def matches(s: SandboxInfo, q: Query, template_ids: set[str] | None) -> bool:
    return (
        s.state in q.states
        and all(s.metadata.get(k) == v for k, v in q.metadata.items())
        and (q.started_after_us is None or s.started_at >= q.started_after_us)
        and (template_ids is None or s.template_id in template_ids)
    )


def page(sandboxes: list[SandboxInfo], q: Query) -> tuple[list[SandboxInfo], str | None]:
    """One page in the query's order, and the token of the next (None on the last page).
    Descending: newest startedAt first, ties by id ascending; ascending is its exact reverse."""

    def key(s: SandboxInfo) -> tuple[int, str]:
        return s.started_at, s.sandbox_id

    def desc_rank(k: tuple[int, str]) -> tuple[int, str]:
        return -k[0], k[1]

    ordered = sorted(sandboxes, key=lambda s: desc_rank(key(s)), reverse=q.ascending)
    if q.after is not None:
        after = desc_rank(q.after)
        if q.ascending:
            ordered = [s for s in ordered if desc_rank(key(s)) < after]
        else:
            ordered = [s for s in ordered if desc_rank(key(s)) > after]
    items = ordered[: q.limit]
    more = len(ordered) > q.limit
    return items, encode_token(key(items[-1]), q.ascending) if more and items else None
