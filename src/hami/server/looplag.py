"""How long the event loop was held: a task that asks to sleep a short while and reports how much later it woke.

Anything that keeps the loop from its other work (a long decision, decoding a big list page, a self-check or a
scrape done in one go) shows here as lag; ``hami_event_loop_lag_seconds`` counts every wake by its lateness.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["LAG_INTERVAL_S", "watch_loop_lag"]

LAG_INTERVAL_S = 0.05
"""How long the watcher sleeps between wakes (20 wakes a second: a few µs of CPU each)."""


async def watch_loop_lag(
    observe: Callable[[float], None],
    *,
    interval: float = LAG_INTERVAL_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Forever: sleep ``interval`` and ``observe`` how many seconds later than that the loop woke this task."""
    while True:
        started = clock()
        await sleep(interval)
        observe(max(0.0, clock() - started - interval))
