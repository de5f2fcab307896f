"""How long the event loop was held: a task that asks to sleep a short while and reports how much later it woke.

Anything that keeps the loop from its other work (a long decision, decoding a big list page, a self-check or a
scrape done in one go) shows here as lag; ``hami_event_loop_lag_seconds`` counts every wake by its lateness.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

__all__ = ["LAG_INTERVAL_S", "STALL_S", "watch_loop_lag"]

log = logging.getLogger("hami.looplag")

LAG_INTERVAL_S = 0.05
"""How long the watcher sleeps between wakes (20 wakes a second: a few µs of CPU each)."""
STALL_S = 0.1
"""A lag this long or longer is also logged (``event loop held for <s> s (<c> s on the CPU)``): every request and
watch event waited. The CPU part is this thread's CPU time meanwhile: what hami's own work held the loop, against
the rest, when the process waited for a core (a loaded machine)."""


async def watch_loop_lag(
    observe: Callable[[float], None],
    *,
    interval: float = LAG_INTERVAL_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.thread_time,
) -> None:
    """Forever: sleep ``interval`` and ``observe`` how many seconds later than that the loop woke this task; a lag
    of :data:`STALL_S` or more is logged too."""
    while True:
        started, cpu = clock(), cpu_clock()
        await sleep(interval)
        lag = max(0.0, clock() - started - interval)
        observe(lag)
        if lag >= STALL_S:
            log.info("event loop held for %.3f s (%.3f s on the CPU)", lag, cpu_clock() - cpu)
