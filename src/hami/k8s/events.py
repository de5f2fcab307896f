"""Kubernetes Events, fire-and-forget (spec webhook §4): an event write never blocks or fails a Filter or Bind.

:meth:`EventRecorder.record` returns at once; the write runs in the background, at most ``max_in_flight`` at a
time. When ``max_pending`` writes are already waiting (the API server is slow or down), further events are
dropped rather than queued without bound. Failed and dropped writes are logged and counted in
:attr:`EventRecorder.stats`, which the metrics layer reads; nothing is raised to the caller.

Folded as client-go's recorder folds them: the same event again (same object, type, reason and message) is not a
new Event but a PATCH of the first one's ``count`` and ``lastTimestamp``; occurrences that arrive while that
object's write is in flight are folded into the write that follows it. Writes are rate limited per involved
object as client-go's spam filter does (a bucket of ``burst`` writes, refilled by one every ``refill`` seconds);
an occurrence beyond it is still counted and lands with that event's next write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from hami.errors import NotFound
from hami.k8s.cluster import ClusterClient
from hami.k8s.records import ObjectRef

__all__ = ["EventRecorder", "EventStats"]

log = logging.getLogger(__name__)

V = TypeVar("V")

CACHE = 4096
"""Events remembered for folding, and objects for rate limiting (least recently used forgotten first), as
client-go's ``maxLruCacheEntries``."""


@dataclass(slots=True)
class EventStats:
    """Counters since start: events written, writes that failed, events dropped because too many were pending;
    occurrences folded into an existing Event (``folded``), and occurrences held back by the per-object rate limit
    (``limited``)."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0
    folded: int = 0
    limited: int = 0


@dataclass(slots=True)
class _Series:
    """One event and its repetitions: the Event's name once created, occurrences seen, and the count written."""

    namespace: str
    name: str = ""
    count: int = 0
    written: int = 0
    writing: bool = False


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


def _object(involved: ObjectRef) -> tuple[str, ...]:
    return (involved.kind, involved.namespace, involved.name, involved.uid)


class EventRecorder:
    """Writes events about pods and nodes as ``component`` (the ``--scheduler-name``, as HAMi's source component)."""

    def __init__(
        self,
        cluster: ClusterClient,
        component: str,
        *,
        max_in_flight: int = 8,
        max_pending: int = 1000,
        burst: int = 25,
        refill: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.component = component
        self.max_pending = max_pending
        self.burst = burst
        self.refill = refill
        self.stats = EventStats()
        self._clock = clock
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()

    @property
    def pending(self) -> int:
        """Writes started or waiting for a slot."""
        return len(self._tasks)

    def record(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Queue an event about ``involved``; returns immediately (must be called from the event loop)."""
        obj = _object(involved)
        series = self._remember(self._series, (*obj, type, reason, message), lambda: _Series(involved.namespace))
        series.count += 1
        if series.count > 1:
            self.stats.folded += 1
        if series.writing:
            return  # the write in flight is followed by one that carries this occurrence
        if not self._allowed(obj):
            self.stats.limited += 1
            return
        if len(self._tasks) >= self.max_pending:
            self.stats.dropped += 1
            log.warning("dropping event %s %s for %s: %d writes pending", type, reason, involved.name, self.pending)
            return
        series.writing = True
        task = asyncio.get_running_loop().create_task(self._write(series, involved, type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _remember(cache: OrderedDict[tuple[str, ...], V], key: tuple[str, ...], new: Callable[[], V]) -> V:
        value = cache.get(key)
        if value is None:
            value = cache[key] = new()
            if len(cache) > CACHE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return value

    def _allowed(self, obj: tuple[str, ...]) -> bool:
        """Take a token from the object's bucket (client-go's ``EventSourceObjectSpamFilter``)."""
        now = self._clock()
        bucket = self._remember(self._buckets, obj, lambda: _Bucket(float(self.burst), now))
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) / self.refill)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    async def _write(self, series: _Series, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        try:
            async with self._slots:
                await self._write_series(series, involved, type, reason, message)
        finally:
            series.writing = False

    async def _write_series(self, series: _Series, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        first = True
        while series.written < series.count and (first or self._allowed(_object(involved))):
            first = False
            count = series.count
            try:
                if series.name:
                    await self.cluster.fold_event(series.namespace or "default", series.name, count)
                    series.written = count
                else:
                    series.name = await self.cluster.emit_event(involved, type, reason, message, self.component)
                    series.written = 1
            except Exception as exc:
                self.stats.failed += 1
                if isinstance(exc, NotFound):
                    series.name, series.count, series.written = "", 0, 0  # expired (the API keeps events an hour)
                what = f"{involved.kind} {involved.namespace}/{involved.name}".replace(" /", " ")
                log.warning("cannot write event %s %s for %s: %s", type, reason, what, exc)
                return
            self.stats.sent += 1

    async def flush(self) -> None:
        """Wait until every queued write has finished (tests; graceful shutdown)."""
        while self._tasks:
            tasks = list(self._tasks)
            await asyncio.gather(*tasks, return_exceptions=True)
            # Drop them here, not only in their done callbacks: from Python 3.12 on, gathering tasks that are
            # already done returns without yielding to the loop, so those callbacks would never get to run.
            self._tasks.difference_update(tasks)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Give pending writes ``timeout`` seconds, then cancel what is left."""
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
