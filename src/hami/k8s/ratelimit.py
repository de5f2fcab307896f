"""Client-side rate limiting of API requests: a token bucket (``--kube-qps`` / ``--kube-burst``).

HAMi inherits client-go's 5 QPS / 10 burst defaults, which throttle binding (each Bind is 3+ requests). hami's
defaults are set by the caller (see ``ClientSettings``); the bucket itself only does the arithmetic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from hami.errors import ConfigError

__all__ = ["Clock", "Sleep", "TokenBucket"]

Clock = Callable[[], float]  # monotonic seconds
Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; each request takes one.

    A request that finds the bucket empty *reserves* the next token (the count goes negative) and waits until it
    is due, so concurrent callers are served first come, first served without a lock, and the long-run rate never
    exceeds ``qps``. ``qps <= 0`` disables limiting. The clock and sleep are injected for tests.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        if qps > 0 and burst < 1:
            raise ConfigError("kube-burst", burst, "must be at least 1 when kube-qps is positive")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token now; return how many seconds the caller must wait before using it (0 if none)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        """Wait for a token."""
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
