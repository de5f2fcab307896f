"""``NodeLockWaits``: lock waits woken by the node watch, one waiter per release, in arrival order."""

from __future__ import annotations

import asyncio

from hami.k8s.lockwaits import NodeLockWaits, lock_holder
from hami.protocol.nodelock import NodeLock, encode_node_lock
from tests.unit.server.support import NOW_DT

A = encode_node_lock(NodeLock(NOW_DT, "ns", "a"))
B = encode_node_lock(NodeLock(NOW_DT, "ns", "b"))


async def spin() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_the_holder_named_by_a_lock_value() -> None:
    assert [lock_holder(v) for v in (A, None, "garbage")] == ["ns/a", None, ""]


async def test_a_release_wakes_one_waiter_in_arrival_order_and_a_failed_try_passes_the_turn() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    first = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    second = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    waits.seen("n", A)  # an unrelated update of the node (the lock still held): nobody wakes
    await spin()
    assert (first.done(), second.done(), waits.waiting("n")) == (False, False, 2)

    waits.seen("n", None)
    await spin()
    assert (first.done(), second.done()) == (True, False)
    assert first.result() is True
    waits.seen("n", None)  # another event while the first one's try is under way: still only one try
    await spin()
    assert not second.done()

    waits.tried("n", False)  # it lost the race (or its bind ended) and the node is free: the next one's turn
    await spin()
    assert second.done()
    assert second.result() is True


async def test_a_taken_lock_waits_for_its_own_release() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    first = asyncio.create_task(waits.wait("n", "ns/a", 30))
    second = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    waits.seen("n", None)
    await spin()
    waits.tried("n", True)  # the first one took it
    waits.seen("n", B)
    await spin()
    assert not second.done()
    waits.seen("n", None)
    await spin()
    assert first.result() is True
    assert second.result() is True


async def test_a_wait_that_starts_after_the_release_returns_at_once_and_a_lagging_watch_wakes_nobody() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    waits.seen("n", None)  # released before the bind that found "a" holding it began to wait
    assert await asyncio.wait_for(waits.wait("n", "ns/a", 30), 1) is True
    waits.tried("n", True)

    lagging = asyncio.create_task(waits.wait("n", "ns/b", 30))  # the watch has not shown b's lock yet
    await spin()
    assert not lagging.done()
    waits.seen("n", B)
    waits.seen("n", None)
    await spin()
    assert lagging.result() is True


async def test_a_wait_runs_out_and_a_cancelled_waiter_gives_its_turn_away() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    assert await waits.wait("n", "ns/a", 0.01) is False
    assert waits.waiting("n") == 0

    first = asyncio.create_task(waits.wait("n", "ns/a", 30))
    second = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    first.cancel()  # its bind was abandoned before the release
    waits.seen("n", None)
    await spin()
    assert second.result() is True
    assert first.cancelled()


async def test_a_deleted_node_wakes_its_waiters() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    waiter = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    waits.gone("n")
    await spin()
    assert waiter.done()


async def test_a_waiter_cancelled_after_it_was_woken_passes_its_turn_on() -> None:
    waits = NodeLockWaits()
    waits.seen("n", A)
    first = asyncio.create_task(waits.wait("n", "ns/a", 30))
    second = asyncio.create_task(waits.wait("n", "ns/a", 30))
    await spin()
    waits.seen("n", None)  # wakes the first ...
    first.cancel()  # ... whose bind is abandoned before it could try
    await spin()
    assert first.cancelled()
    assert second.result() is True
