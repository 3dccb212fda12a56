"""Lossless fan-out of a child's output to every attached stream (Go `multiplexer.go`).

Each subscriber has a small bounded buffer (64 items, Go's channel size). A full buffer makes
the publisher wait, which stops reading the child's pipe: a slow client back-pressures the
process instead of growing memory. With no subscriber, items are dropped at once, so output
nobody listens to is read and discarded (Go 0.5.19). A subscriber that goes away releases a
waiting publisher immediately, so it never blocks the others.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from typing import Final, Generic, TypeVar

T = TypeVar("T")

BUFFER_ITEMS: Final = 64


class Signal(enum.Enum):
    """What `Subscription.next` returns instead of an item."""

    TIMEOUT = "timeout"  # nothing arrived within the timeout
    CLOSED = "closed"  # the source closed and every item was taken, or the subscription stopped


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class Subscription(Generic[T]):
    def __init__(self, source: Broadcast[T], capacity: int) -> None:
        self._source = source
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._closed = False  # no more items will come
        self.stopped = False  # left early: unsubscribed or stopped by shutdown
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None

    def _full(self) -> bool:
        return len(self._items) >= self._capacity

    def _put(self, item: T) -> None:
        self._items.append(item)
        _wake(self._reader)

    def _close(self) -> None:
        self._closed = True
        _wake(self._reader)

    async def _wait_for_space(self) -> None:
        loop = asyncio.get_running_loop()
        while self._full() and not self.stopped:
            self._writer = loop.create_future()
            await self._writer

    def stop(self) -> None:
        """Leave now (idempotent): pending items are dropped and a blocked publisher moves on."""
        self.stopped = True
        self._items.clear()
        self._source._subscribers.discard(self)
        _wake(self._writer)
        _wake(self._reader)

    def peek(self) -> T | None:
        """The next buffered item without taking it; None when nothing is buffered."""
        return self._items[0] if self._items else None

    def take(self) -> T:
        """Take the buffered item that peek() returned."""
        item = self._items.popleft()
        _wake(self._writer)
        return item

    def _ended(self) -> bool:
        return self._closed or self.stopped

    async def next(self, wait_s: float | None = None) -> T | Signal:
        """The next item, or TIMEOUT after `wait_s` seconds of nothing, or CLOSED at the end."""
        if not self._items and not self._ended():
            loop = asyncio.get_running_loop()
            reader = self._reader = loop.create_future()
            timer = loop.call_later(wait_s, _wake, reader) if wait_s is not None else None
            try:
                await reader
            finally:
                if timer is not None:
                    timer.cancel()
                self._reader = None
        if self._items:
            return self.take()
        return Signal.CLOSED if self._ended() else Signal.TIMEOUT


class Broadcast(Generic[T]):
    def __init__(self, capacity: int = BUFFER_ITEMS) -> None:
        self._capacity = capacity
        self._subscribers: set[Subscription[T]] = set()
        self.closed = False

    def subscribe(self) -> Subscription[T]:
        """A new subscriber sees only items published from now on (no replay); subscribing
        after close yields a closed subscription."""
        subscription = Subscription(self, self._capacity)
        if self.closed:
            subscription._close()
        else:
            self._subscribers.add(subscription)
        return subscription

    async def publish(self, item: T) -> None:
        """Deliver to every subscriber, waiting while one of them is full."""
        for subscription in list(self._subscribers):
            if subscription._full():
                await subscription._wait_for_space()
            if not subscription.stopped:
                subscription._put(item)

    def close(self) -> None:
        """Subscribers get what is buffered, then CLOSED."""
        self.closed = True
        for subscription in self._subscribers:
            subscription._close()
        self._subscribers.clear()
