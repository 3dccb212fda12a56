"""Broadcast on its own (Go's multiplexer tests): fan-out, an abandoned subscriber never wedges
the others, stop is idempotent, close ends subscribers, subscribing after close."""

from __future__ import annotations

import anyio
import pytest

from envd.process.broadcast import Broadcast, Signal

pytestmark = pytest.mark.anyio


async def test_every_subscriber_gets_every_item_in_order() -> None:
    source: Broadcast[int] = Broadcast(capacity=4)
    subscribers = [source.subscribe() for _ in range(3)]
    received: list[list[int]] = [[] for _ in subscribers]

    async def consume(index: int) -> None:
        while (item := await subscribers[index].next()) is not Signal.CLOSED:
            assert isinstance(item, int)
            received[index].append(item)

    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(consume, index)
        for item in range(100):
            await source.publish(item)
        source.close()
    assert received == [list(range(100))] * 3


async def test_full_subscriber_holds_the_publisher_until_it_reads() -> None:
    source: Broadcast[int] = Broadcast(capacity=2)
    subscriber = source.subscribe()
    await source.publish(1)
    await source.publish(2)
    async with anyio.create_task_group() as tg:
        third = anyio.Event()

        async def publish_third() -> None:
            await source.publish(3)
            third.set()

        tg.start_soon(publish_third)
        await anyio.wait_all_tasks_blocked()
        assert not third.is_set()  # backpressure: no third item while two wait
        assert await subscriber.next() == 1
    assert [await subscriber.next(), await subscriber.next()] == [2, 3]


async def test_abandoned_subscriber_never_wedges_the_others() -> None:
    source: Broadcast[int] = Broadcast(capacity=1)
    abandoned, active = source.subscribe(), source.subscribe()
    got = []

    async def read_all() -> None:
        while (item := await active.next()) is not Signal.CLOSED:
            got.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all)
        await source.publish(0)

        async def publish_rest() -> None:
            for item in range(1, 10):
                await source.publish(item)
            source.close()

        tg.start_soon(publish_rest)
        await anyio.wait_all_tasks_blocked()  # the publisher on the abandoned one's full buffer
        assert got in ([0], [0, 1])  # (the active one may come first in the fan-out)
        abandoned.stop()  # releases the publisher blocked on it
        abandoned.stop()  # idempotent
    assert got == list(range(10))
    assert await abandoned.next() is Signal.CLOSED


async def test_no_subscriber_drops_items_and_late_subscribers_see_no_history() -> None:
    source: Broadcast[int] = Broadcast(capacity=1)
    for item in range(10):
        await source.publish(item)  # never blocks without subscribers
    late = source.subscribe()
    await source.publish(42)
    assert await late.next() == 42
    assert await late.next(0.01) is Signal.TIMEOUT


async def test_close_drains_then_ends_and_later_subscribers_are_closed() -> None:
    source: Broadcast[str] = Broadcast()
    subscriber = source.subscribe()
    await source.publish("last")
    source.close()
    assert await subscriber.next() == "last"
    assert await subscriber.next() is Signal.CLOSED
    assert await source.subscribe().next() is Signal.CLOSED
