"""Down-conversion for the 2024 Python SDK (Go envd 0.2.4+, legacy/conversion.go): when the
User-Agent is exactly `connect-python`, entries keep only name, type and path, and events only
name and type. Errors pass through untouched. Current SDKs never trigger it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

from protobuf import Oneof

from envd._gen.filesystem.filesystem_pb import (
    EntryInfo,
    FilesystemEvent,
    GetWatcherEventsResponse,
    ListDirResponse,
    MakeDirResponse,
    MoveResponse,
    StatResponse,
    WatchDirResponse,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from connectrpc.request import RequestContext

LEGACY_USER_AGENT: Final = "connect-python"


def _entry(entry: EntryInfo | None) -> EntryInfo | None:
    if entry is None:
        return None
    return EntryInfo(name=entry.name, type=entry.type, path=entry.path)


def _event(event: FilesystemEvent) -> FilesystemEvent:
    return FilesystemEvent(name=event.name, type=event.type)


def _watch_response(message: WatchDirResponse) -> WatchDirResponse:
    value = message.event.value if message.event is not None else None
    if not isinstance(value, FilesystemEvent):
        return message  # start and keepalive carry nothing to reduce
    event: Oneof[Literal["filesystem"], FilesystemEvent] = Oneof("filesystem", _event(value))
    return WatchDirResponse(event=event)


def reduce(message: Any) -> Any:
    """The 2024-schema form of a filesystem response (other messages unchanged)."""
    if isinstance(message, StatResponse | MakeDirResponse | MoveResponse):
        return type(message)(entry=_entry(message.entry))
    if isinstance(message, ListDirResponse):
        return ListDirResponse(
            entries=[EntryInfo(name=e.name, type=e.type, path=e.path) for e in message.entries]
        )
    if isinstance(message, GetWatcherEventsResponse):
        return GetWatcherEventsResponse(events=[_event(e) for e in message.events])
    if isinstance(message, WatchDirResponse):
        return _watch_response(message)
    return message


def _is_legacy(ctx: RequestContext[Any, Any]) -> bool:
    if ctx.request_headers.get("user-agent") != LEGACY_USER_AGENT:
        return False
    ctx.response_headers["x-e2b-legacy-sdk"] = "true"
    return True


class LegacySDKInterceptor:
    """Applies reduce() to every response of a request from the legacy SDK."""

    async def intercept_unary(
        self,
        call_next: Callable[[Any, RequestContext[Any, Any]], Awaitable[Any]],
        request: Any,
        ctx: RequestContext[Any, Any],
    ) -> Any:
        legacy = _is_legacy(ctx)
        response = await call_next(request, ctx)
        return reduce(response) if legacy else response

    async def intercept_server_stream(
        self,
        call_next: Callable[[Any, RequestContext[Any, Any]], AsyncIterator[Any]],
        request: Any,
        ctx: RequestContext[Any, Any],
    ) -> AsyncIterator[Any]:
        legacy = _is_legacy(ctx)
        inner = call_next(request, ctx)
        try:
            async for message in inner:
                yield reduce(message) if legacy else message
        finally:
            await inner.aclose()  # type: ignore[attr-defined]  # handlers are async generators
