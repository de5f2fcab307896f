"""Background tasks, started through one place that logs failures and cancels cleanly (STYLE rule 10).

Long-running loops (one watch per resource kind, periodic self-checks) are started with
:meth:`Supervisor.start`, one-shot jobs (a background API write) with :meth:`Supervisor.once`. A task that fails is
logged with its traceback at once, not when someone finally awaits it; a loop that returns early is logged too,
since loops are meant to run until stopped. :meth:`Supervisor.stop`
cancels every task and waits for all of them, so no task outlives the component that started it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Supervisor"]

T = TypeVar("T")


class Supervisor:
    """Owns a set of named tasks. Use as ``async with Supervisor() as tasks:`` or call :meth:`stop`."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger(__name__)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._once: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self.failures: dict[str, BaseException] = {}
        """Name → exception of every task that failed (for tests and health reporting)."""

    def start(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a task named ``name``; the supervisor keeps a reference until it ends."""
        if self._stopping:
            coro.close()
            raise RuntimeError(f"cannot start task {name!r}: the supervisor is stopping")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def once(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run a one-shot job ``coro`` as a task named ``name`` (its end is expected; a failure is logged)."""
        task = self.start(coro, name=name)
        self._once.add(task)
        return task

    async def drain(self) -> None:
        """Wait until every one-shot job started so far, and those they start, has ended."""
        while self._once:
            await asyncio.gather(*list(self._once), return_exceptions=True)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        one_shot = task in self._once
        self._once.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failures[task.get_name()] = exc
            self._log.error("task %s failed", task.get_name(), exc_info=exc)
        elif not self._stopping and not one_shot:
            self._log.warning("task %s ended on its own", task.get_name())

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        """Cancel all tasks and wait until each has finished (failures are already logged)."""
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
