"""``/metrics`` at scale: the time one scrape takes and the longest the event loop waits meanwhile, for the sliced
writer (``hami.server.scrape``) against ``generate_latest`` over the whole registry in one go (the way before)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import generate_latest

from bench.scenarios import Scenario, build_state
from hami.server.metrics import Metrics
from hami.server.scrape import scrape_chunks


async def _measure(work: Any) -> dict[str, float]:
    """Run ``work`` (a coroutine) beside a ticker that records the longest gap between its turns."""
    longest = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last - 0.001)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    size = await work
    elapsed = time.perf_counter() - t0
    stop = True
    await task
    return {"seconds": elapsed, "loop_stall_ms": longest * 1e3, "mb": size / 2**20}


def bench_scrape(s: Scenario) -> dict[str, Any]:
    state = build_state(s)
    metrics = Metrics(lambda: state)

    async def whole() -> int:
        return len(generate_latest(metrics.registry))

    async def sliced() -> int:
        return sum([len(chunk) async for chunk in scrape_chunks(metrics, state)])

    async def run() -> dict[str, Any]:
        before = await _measure(whole())
        after = await _measure(sliced())
        return {"generate_latest": before, "sliced": after}

    return asyncio.run(run())


if __name__ == "__main__":
    import sys

    from bench.scenarios import SCENARIOS

    for name in sys.argv[1:] or ["M"]:
        print(name, bench_scrape(SCENARIOS[name]))
