"""Kubernetes Events, fire-and-forget (spec webhook §4): an event write never blocks or fails a Filter or Bind.

:meth:`EventRecorder.record` returns at once; the write runs in the background, at most ``max_in_flight`` at a
time. When ``max_pending`` writes are already waiting (the API server is slow or down), further events are
dropped rather than queued without bound. Failed and dropped writes are logged and counted in
:attr:`EventRecorder.stats`, which the metrics layer reads; nothing is raised to the caller.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from hami.k8s.cluster import ClusterClient
from hami.k8s.records import ObjectRef

__all__ = ["EventRecorder", "EventStats"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EventStats:
    """Counters since start: events written, writes that failed, events dropped because too many were pending."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0


class EventRecorder:
    """Writes events about pods and nodes as ``component`` (the ``--scheduler-name``, as HAMi's source component)."""

    def __init__(
        self, cluster: ClusterClient, component: str, *, max_in_flight: int = 8, max_pending: int = 1000
    ) -> None:
        self.cluster = cluster
        self.component = component
        self.max_pending = max_pending
        self.stats = EventStats()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Writes started or waiting for a slot."""
        return len(self._tasks)

    def record(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Queue an event about ``involved``; returns immediately (must be called from the event loop)."""
        if len(self._tasks) >= self.max_pending:
            self.stats.dropped += 1
            log.warning("dropping event %s %s for %s: %d writes pending", type, reason, involved.name, self.pending)
            return
        task = asyncio.get_running_loop().create_task(self._write(involved, type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        async with self._slots:
            try:
                await self.cluster.emit_event(involved, type, reason, message, self.component)
            except Exception as exc:
                self.stats.failed += 1
                what = f"{involved.kind} {involved.namespace}/{involved.name}".replace(" /", " ")
                log.warning("cannot write event %s %s for %s: %s", type, reason, what, exc)
            else:
                self.stats.sent += 1

    async def flush(self) -> None:
        """Wait until every queued write has finished (tests; graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Give pending writes ``timeout`` seconds, then cancel what is left."""
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
