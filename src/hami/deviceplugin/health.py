"""GPU health: critical XID events from NVML mark GPUs unhealthy (pushed to kubelet and the scheduler at once)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from hami.deviceplugin.discovery import GpuSource
from hami.deviceplugin.nvml import APPLICATION_XIDS
from hami.deviceplugin.state import DeviceState
from hami.errors import NvmlError

__all__ = ["HEALTH_POLL_MS", "RETRY_S", "watch_health"]

log = logging.getLogger(__name__)

HEALTH_POLL_MS: Final = 1000
"""How long one NVML event wait blocks; bounds how long shutting NVML down waits for the health thread."""
RETRY_S: Final = 30.0
"""After NVML refused events: they rarely start working by themselves, so retry slowly."""


async def watch_health(
    source: GpuSource,
    state: DeviceState,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    poll_ms: int = HEALTH_POLL_MS,
) -> None:
    """Mark GPUs unhealthy on critical XIDs (application XIDs excepted) until cancelled.

    Like NVIDIA's plugin, a GPU stays unhealthy until the plugin restarts. If NVML cannot deliver events
    (some MIG or virtualised GPUs cannot), this logs and tries again after ``RETRY_S``.
    """
    await state.discovered.wait()
    while True:
        try:
            if not source.watching:
                await asyncio.to_thread(source.watch_xids, state.snapshot().gpus)
            event = await asyncio.to_thread(source.next_xid, poll_ms)
        except NvmlError as exc:
            log.warning("GPU health events unavailable, retrying in %gs: %s", RETRY_S, exc)
            await sleep(RETRY_S)
            continue
        if event is None:
            continue
        if event.xid in APPLICATION_XIDS:
            log.info("GPU %s: XID %d (an application error), health unchanged", event.uuid, event.xid)
            continue
        if await state.set_health(event.uuid, healthy=False):
            log.error("GPU %s: critical XID %d, marking it unhealthy", event.uuid, event.xid)
