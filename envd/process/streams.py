"""Start/Connect stream framing: start{pid} first, then data and keepalives, then end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, cast

from protobuf import Oneof

from envd._gen.process.process_pb import ProcessEvent
from envd.process.broadcast import Signal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from envd.process.broadcast import Subscription
    from envd.process.handle import Chunk, OutputKind, ProcessHandle

# A client slower than the child finds several chunks waiting; they go out as one event (same
# kind, in order) instead of one event per read, which the per-message cost of the stream
# would make the bottleneck. A quarter MiB already amortises that cost; larger events only
# make every buffer on the way out (merged chunks, encoded message, envelope, HTTP chunk)
# larger and colder in the CPU caches.
MAX_EVENT_BYTES: Final = 256 * 1024


def process_timeout_s(headers: Mapping[str, str]) -> float | None:
    """`Connect-Timeout-Ms` on Start also bounds the process's life (Go kills it at the
    deadline); None when absent or 0 (unlimited). connectrpc itself rejects a non-integer
    value with invalid_argument before the handler runs."""
    try:
        ms = int(headers.get("connect-timeout-ms", "0"))
    except ValueError:
        return None
    return ms / 1000 if ms > 0 else None


def start_event(pid: int) -> ProcessEvent:
    start: Oneof[Literal["start"], ProcessEvent.StartEvent]
    start = Oneof("start", ProcessEvent.StartEvent(pid=pid))
    return ProcessEvent(event=start)


def end_of(end: ProcessEvent.EndEvent) -> ProcessEvent:
    event: Oneof[Literal["end"], ProcessEvent.EndEvent] = Oneof("end", end)
    return ProcessEvent(event=event)


def data_event(kind: OutputKind, data: bytes) -> ProcessEvent:
    # One wire type (bytes) for all three kinds; mypy cannot narrow a Literal union here.
    output = cast("Oneof[Literal['stdout'], bytes]", Oneof(kind, data))
    event: Oneof[Literal["data"], ProcessEvent.DataEvent]
    event = Oneof("data", ProcessEvent.DataEvent(output=output))
    return ProcessEvent(event=event)


_KEEPALIVE_ONEOF: Oneof[Literal["keepalive"], ProcessEvent.KeepAlive]
_KEEPALIVE_ONEOF = Oneof("keepalive", ProcessEvent.KeepAlive())
_KEEPALIVE: Final = ProcessEvent(event=_KEEPALIVE_ONEOF)


def _coalesced(first: Chunk, subscription: Subscription[Chunk]) -> Chunk:
    """`first` and the chunks of its kind queued behind it, up to MAX_EVENT_BYTES."""
    kind, data = first
    parts, size = [data], len(data)
    while (
        (following := subscription.peek()) is not None
        and following[0] == kind
        and size + len(following[1]) <= MAX_EVENT_BYTES
    ):
        parts.append(subscription.take()[1])
        size += len(parts[-1])
    return first if len(parts) == 1 else (kind, b"".join(parts))


async def process_events(
    handle: ProcessHandle, subscription: Subscription[Chunk], interval_s: float
) -> AsyncIterator[ProcessEvent]:
    """start, then every chunk as a data event (keepalive after `interval_s` without data),
    then the end event. Stops without an end event when the daemon is shutting down."""
    yield start_event(handle.pid)
    while True:
        item = await subscription.next(interval_s)
        if item is Signal.TIMEOUT:
            yield _KEEPALIVE
        elif item is Signal.CLOSED:
            break
        else:
            yield data_event(*_coalesced(item, subscription))
    if subscription.stopped:
        return
    yield end_of(await handle.end)
