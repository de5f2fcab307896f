"""The plugin's current view of its GPUs, shared by registration, health checking and ``ListAndWatch``.

One writer per fact: discovery replaces the GPU list (:meth:`DeviceState.set_gpus`), health checking marks GPUs
unhealthy (:meth:`DeviceState.set_health`). Every change bumps ``version`` and wakes the waiters, so a health
change reaches kubelet (a new ``ListAndWatch`` message) and the node annotation (an early registration) at once.
All methods run on the event loop; none blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hami.deviceplugin.discovery import GpuInfo

__all__ = ["DeviceState", "Snapshot", "sleep_or_change"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    gpus: tuple[GpuInfo, ...]
    unhealthy: frozenset[str]
    version: int


class DeviceState:
    def __init__(self) -> None:
        self._gpus: tuple[GpuInfo, ...] = ()
        self._unhealthy: set[str] = set()
        self._version = 0
        self._changed = asyncio.Condition()
        self.discovered = asyncio.Event()
        """Set once the first discovery succeeded (the kubelet endpoint waits for it)."""

    def snapshot(self) -> Snapshot:
        return Snapshot(self._gpus, frozenset(self._unhealthy), self._version)

    @property
    def version(self) -> int:
        return self._version

    async def _bump(self) -> None:
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def set_gpus(self, gpus: tuple[GpuInfo, ...]) -> bool:
        """Replace the discovered GPUs; returns whether anything changed."""
        self.discovered.set()
        if gpus == self._gpus:
            return False
        self._gpus = gpus
        await self._bump()
        return True

    async def set_health(self, uuid: str, healthy: bool) -> bool:
        """Mark one GPU (un)healthy; returns whether its health changed."""
        if healthy == (uuid not in self._unhealthy):
            return False
        if healthy:
            self._unhealthy.discard(uuid)
        else:
            self._unhealthy.add(uuid)
        await self._bump()
        return True

    async def wait_changed(self, since: int) -> int:
        """Wait until ``version`` is past ``since``; returns the new version."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._version != since)
            return self._version


async def sleep_or_change(
    state: DeviceState, since: int, seconds: float, sleep: Callable[[float], Awaitable[None]]
) -> None:
    """Return after ``seconds`` (through the injected ``sleep``), or earlier when ``state`` changes."""
    sleeper = asyncio.ensure_future(sleep(seconds))
    change = asyncio.ensure_future(state.wait_changed(since))
    try:
        await asyncio.wait({sleeper, change}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, change):
            task.cancel()
        for task in (sleeper, change):
            with contextlib.suppress(asyncio.CancelledError):
                await task
