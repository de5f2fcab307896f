from __future__ import annotations

import asyncio
import logging

import pytest

from hami.errors import ApiError
from hami.k8s.events import EventRecorder, EventStats
from hami.k8s.memory import MemoryCluster, RecordedEvent
from hami.k8s.records import ObjectRef
from hami.protocol.events import EventType

NORMAL, WARNING = EventType.NORMAL, EventType.WARNING

POD = ObjectRef("Pod", "p", "default", "uid-p")


class Slow(MemoryCluster):
    """Event writes wait until the test opens the gate; records how many run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.running = 0
        self.peak = 0

    async def emit_event(self, involved: ObjectRef, type: str, reason: str, message: str, component: str) -> str:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.gate.wait()
            return await super().emit_event(involved, type, reason, message, component)
        finally:
            self.running -= 1


async def test_events_are_written_in_the_background_as_the_component() -> None:
    memory = MemoryCluster()
    recorder = EventRecorder(memory, "hami-scheduler")
    recorder.record(POD, NORMAL, "BindingSucceed", "Successfully binding node [n1] to default/p")
    assert memory.events == []  # record() only queues
    await recorder.flush()
    assert memory.events == [
        RecordedEvent(POD, NORMAL, "BindingSucceed", "Successfully binding node [n1] to default/p", "hami-scheduler")
    ]
    assert recorder.stats == EventStats(sent=1)


async def test_a_failed_write_is_counted_and_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    memory = MemoryCluster()
    memory.fail("emit_event", ApiError("forbidden", 403))
    recorder = EventRecorder(memory, "hami-scheduler")
    recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    recorder.record(POD, WARNING, "FilteringFailed", "again")
    await recorder.flush()
    assert recorder.stats == EventStats(sent=1, failed=1)
    assert any(
        r.levelno == logging.WARNING
        and "cannot write event Warning FilteringFailed for Pod default/p: forbidden" in r.getMessage()
        for r in caplog.records
    )


async def test_concurrency_is_bounded_and_excess_events_are_dropped() -> None:
    slow = Slow()
    recorder = EventRecorder(slow, "hami-scheduler", max_in_flight=2, max_pending=5)
    for i in range(8):
        recorder.record(POD, NORMAL, "R", str(i))
    for _ in range(5):
        await asyncio.sleep(0)
    assert (slow.running, recorder.pending, recorder.stats.dropped) == (2, 5, 3)
    slow.gate.set()
    await recorder.flush()
    assert slow.peak == 2
    assert [e.message for e in slow.events] == ["0", "1", "2", "3", "4"]
    assert recorder.stats == EventStats(sent=5, dropped=3)


async def test_aclose_gives_up_on_writes_that_hang() -> None:
    slow = Slow()
    recorder = EventRecorder(slow, "hami-scheduler")
    recorder.record(POD, NORMAL, "R", "stuck")
    await recorder.aclose(timeout=0.01)
    assert recorder.pending == 0
    assert slow.events == []


# --- folding and rate limiting, as client-go's recorder ----------------------------------------------------

OTHER = ObjectRef("Pod", "q", "default", "uid-q")


async def test_the_same_event_again_is_folded_into_the_first_one() -> None:
    memory = MemoryCluster()
    recorder = EventRecorder(memory, "hami-scheduler")
    for _ in range(3):
        recorder.record(POD, WARNING, "FilteringFailed", "no available node")
        await recorder.flush()
    recorder.record(POD, WARNING, "FilteringFailed", "another message")
    recorder.record(OTHER, WARNING, "FilteringFailed", "no available node")
    await recorder.flush()

    assert [(e.involved.name, e.message, e.count) for e in memory.events] == [
        ("p", "no available node", 3),
        ("p", "another message", 1),
        ("q", "no available node", 1),
    ]
    assert memory.calls.count("emit_event") == 3
    assert memory.calls.count("fold_event") == 2
    assert recorder.stats == EventStats(sent=5, folded=2)


async def test_occurrences_during_a_write_land_with_one_write_after_it() -> None:
    slow = Slow()
    recorder = EventRecorder(slow, "hami-scheduler")
    recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    await asyncio.sleep(0)
    for _ in range(3):
        recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    assert recorder.pending == 1
    slow.gate.set()
    await recorder.flush()

    assert [e.count for e in slow.events] == [4]
    assert (slow.calls.count("emit_event"), slow.calls.count("fold_event")) == (1, 1)


async def test_writes_are_rate_limited_per_object_and_a_held_back_occurrence_lands_later() -> None:
    memory, now = MemoryCluster(), [0.0]
    recorder = EventRecorder(memory, "hami-scheduler", burst=2, refill=10.0, clock=lambda: now[0])
    for message in ("a", "b", "c"):
        recorder.record(POD, WARNING, "FilteringFailed", message)
    recorder.record(OTHER, WARNING, "FilteringFailed", "a")  # another object has its own bucket
    await recorder.flush()
    assert [(e.involved.name, e.message) for e in memory.events] == [("p", "a"), ("p", "b"), ("q", "a")]
    assert recorder.stats.limited == 1

    recorder.record(POD, WARNING, "FilteringFailed", "a")  # still no token: counted, not written
    await recorder.flush()
    now[0] = 10.0  # one token back
    recorder.record(POD, WARNING, "FilteringFailed", "a")
    await recorder.flush()
    assert [(e.message, e.count) for e in memory.events if e.involved.name == "p"] == [("a", 3), ("b", 1)]
    assert recorder.stats.limited == 2


async def test_an_event_gone_from_the_api_is_created_again() -> None:
    memory = MemoryCluster()
    recorder = EventRecorder(memory, "hami-scheduler")
    recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    await recorder.flush()
    memory.events.clear()  # expired (the API keeps events an hour)
    recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    await recorder.flush()
    assert memory.events == []
    assert recorder.stats.failed == 1
    recorder.record(POD, WARNING, "FilteringFailed", "no available node")
    await recorder.flush()
    assert [(e.message, e.count) for e in memory.events] == [("no available node", 1)]
