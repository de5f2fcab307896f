"""The event-loop lag watcher: how much later than asked its sleep woke."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time

import pytest

from hami.scheduling.state import ClusterState
from hami.server.looplag import GcTimer, watch_loop_lag
from hami.server.metrics import Metrics


async def test_a_callback_that_holds_the_loop_shows_as_lag_of_about_its_length() -> None:
    seen: list[float] = []
    watcher = asyncio.create_task(watch_loop_lag(seen.append, interval=0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.2)  # holds the loop, as a long decision would
    await asyncio.sleep(0.05)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    assert max(seen) >= 0.15
    assert all(lag >= 0 for lag in seen)


async def test_the_cpu_part_of_a_logged_stall_is_the_threads_cpu_time_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "hami.looplag")
    watcher = asyncio.create_task(watch_loop_lag(lambda _: None, interval=0.01))
    await asyncio.sleep(0.03)
    deadline = time.thread_time() + 0.2
    while time.thread_time() < deadline:  # busy: the CPU holds the loop for 0.2 s of its own time, however loaded
        pass
    await asyncio.sleep(0.03)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    pattern = r"event loop held for ([0-9.]+) s \(([0-9.]+) s on the CPU, [0-9.]+ s collecting garbage\)"
    lines = [r.getMessage() for r in caplog.records]
    found = [re.fullmatch(pattern, line) for line in lines]
    assert lines
    assert all(found), lines
    # a loaded machine may add short stalls of its own around the busy one: the busy one is the longest
    wall, cpu = max((float(f[1]), float(f[2])) for f in found if f is not None)
    assert cpu >= 0.19
    assert wall >= cpu - 0.01


async def test_a_late_wake_is_observed_as_the_time_beyond_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hami.looplag")
    now = [100.0]
    seen: list[float] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds + (0.3 if len(seen) == 1 else 0.0)
        if len(seen) == 3:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await watch_loop_lag(seen.append, interval=0.05, sleep=sleep, clock=lambda: now[0], cpu_clock=lambda: 1.0)
    assert seen == pytest.approx([0.0, 0.3, 0.0])
    assert [r.getMessage() for r in caplog.records] == [
        "event loop held for 0.300 s (0.000 s on the CPU, 0.000 s collecting garbage)"
    ]


async def test_a_stall_names_the_time_the_garbage_collector_ran_meanwhile(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hami.looplag")
    timer = GcTimer()
    watcher = asyncio.create_task(watch_loop_lag(lambda _: None, interval=0.01, gc_timer=timer))
    await asyncio.sleep(0.03)
    assert timer in gc.callbacks
    garbage = []
    for _ in range(200_000):  # cycles the collector must walk: a full collection takes a while
        cell: list[object] = []
        cell.append(cell)
        garbage.append(cell)
    started = time.perf_counter()
    del garbage
    gc.collect()
    collected = time.perf_counter() - started
    if collected < 0.1:  # a fast machine: hold the loop the rest of the way, outside the collector
        time.sleep(0.1 - collected)
    await asyncio.sleep(0.03)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    assert timer not in gc.callbacks
    [line] = [r.getMessage() for r in caplog.records]
    found = re.fullmatch(
        r"event loop held for ([0-9.]+) s \(([0-9.]+) s on the CPU, ([0-9.]+) s collecting garbage\)", line
    )
    assert found is not None, line
    assert float(found[3]) <= timer.total + 0.001  # the collections of the stall, out of all since installed
    assert float(found[3]) >= collected * 0.5
    assert float(found[3]) <= float(found[1]) + 0.01


def test_the_lag_is_a_histogram_of_hamis_own_metrics() -> None:
    metrics = Metrics(lambda: ClusterState({}))
    metrics.loop_lag.observe(0.12)
    assert metrics.registry.get_sample_value("hami_event_loop_lag_seconds_bucket", {"le": "0.1"}) == 0
    assert metrics.registry.get_sample_value("hami_event_loop_lag_seconds_bucket", {"le": "0.25"}) == 1
