"""How long the event loop was held: a task that asks to sleep a short while and reports how much later it woke.

Anything that keeps the loop from its other work (a long decision, decoding a big list page, a self-check or a
scrape done in one go) shows here as lag; ``hami_event_loop_lag_seconds`` counts every wake by its lateness.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["LAG_INTERVAL_S", "STALL_S", "GcTimer", "watch_loop_lag"]

log = logging.getLogger("hami.looplag")

LAG_INTERVAL_S = 0.05
"""How long the watcher sleeps between wakes (20 wakes a second: a few µs of CPU each)."""
STALL_S = 0.1
"""A lag this long or longer is also logged (``event loop held for <s> s (<c> s on the CPU, <g> s collecting
garbage)``): every request and watch event waited. The CPU part is this thread's CPU time meanwhile: what hami's own
work held the loop, against the rest, when the process waited for a core (a loaded machine); the garbage part is
the time Python's cyclic garbage collector ran meanwhile (``GcTimer``)."""


class GcTimer:
    """The seconds Python's cyclic garbage collector has run while installed (``gc.callbacks``): a full collection
    walks every object created since the heap was frozen (``settle_heap``), which a stall's log line then names."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.total = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self.clock()
        else:
            self.total += self.clock() - self._started

    def seconds(self) -> float:
        return self.total


async def watch_loop_lag(
    observe: Callable[[float], None],
    *,
    interval: float = LAG_INTERVAL_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.thread_time,
    gc_timer: GcTimer | None = None,
) -> None:
    """Forever: sleep ``interval`` and ``observe`` how many seconds later than that the loop woke this task; a lag
    of :data:`STALL_S` or more is logged too, with the garbage collector's part (``gc_timer``; a ``GcTimer`` is
    installed in ``gc.callbacks`` while this runs)."""
    timer = gc_timer or GcTimer()
    gc.callbacks.append(timer)
    try:
        while True:
            started, cpu, collecting = clock(), cpu_clock(), timer.seconds()
            await sleep(interval)
            lag = max(0.0, clock() - started - interval)
            observe(lag)
            if lag >= STALL_S:
                log.info(
                    "event loop held for %.3f s (%.3f s on the CPU, %.3f s collecting garbage)",
                    lag,
                    cpu_clock() - cpu,
                    timer.seconds() - collecting,
                )
    finally:
        gc.callbacks.remove(timer)
