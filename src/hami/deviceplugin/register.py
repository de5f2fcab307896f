"""Registration: keep the node's ``hami.io/node-nvidia-register`` (and ``-score``) annotations true.

:meth:`Registrar.run` is HAMi's ``WatchAndRegister`` loop (webhook §6.1): discover the GPUs, build the
inventory, and patch the node only when a value differs from what the node carries; then wait 30 s after a
success (changed or not) or 5 s after an error. A GPU health change ends the wait early, so the scheduler sees an
unhealthy GPU within one API round trip rather than up to 30 s later.

*Difference from HAMi:* the comparison is with the node's current annotations, not with the last value this
process wrote, so an annotation removed or overwritten by someone else is restored on the next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from hami.deviceplugin.discovery import GpuInfo, GpuSource, Links
from hami.deviceplugin.inventory import Asymmetry, node_devices, pair_scores, registered_gpus
from hami.deviceplugin.settings import NodeSettings
from hami.deviceplugin.state import DeviceState, sleep_or_change
from hami.errors import HamiError
from hami.k8s.cluster import ClusterClient
from hami.k8s.records import ObjectRef
from hami.protocol import keys
from hami.protocol.events import EventType
from hami.protocol.inventory import encode_inventory_json
from hami.protocol.objects import Node
from hami.protocol.scores import encode_pair_scores

__all__ = ["RegisterTiming", "Registrar", "desired_annotations"]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

ASYMMETRY_EVENT_INTERVAL: Final = 3600.0
"""Seconds between two AsymmetricGPUP2PLink events for one GPU pair: the links do not change by themselves."""
EVENT_COMPONENT: Final = "hami-device-plugin"


def _links(links: Links) -> str:
    pcie = links.pcie.name if links.pcie is not None else "unknown PCIe path"
    return f"{pcie}, {links.nvlinks} NVLink(s)"


@dataclass(frozen=True, slots=True)
class RegisterTiming:
    """When the registration loop runs again."""

    interval: float = 30.0
    """After a successful round, changed or not: HAMi's plugin period. GPUs rarely change; health changes
    interrupt the wait anyway."""
    retry: float = 5.0
    """After a failed round (NVML or API error): soon enough to recover quickly, slow enough not to flood logs."""


def desired_annotations(
    gpus: Sequence[GpuInfo], settings: NodeSettings, unhealthy: frozenset[str]
) -> tuple[dict[str, str], list[Asymmetry]]:
    """The node annotations this plugin owns, as they should be now."""
    values = {keys.NVIDIA_REGISTER: encode_inventory_json(node_devices(gpus, settings, unhealthy))}
    asymmetric: list[Asymmetry] = []
    if settings.topology_score:
        scores, asymmetric = pair_scores(registered_gpus(gpus, settings))
        values[keys.NVIDIA_SCORE] = encode_pair_scores(scores)
    return values, asymmetric


class Registrar:
    """The registration loop for one node (module docstring)."""

    def __init__(
        self,
        cluster: ClusterClient,
        node_name: str,
        source: GpuSource,
        state: DeviceState,
        settings: NodeSettings,
        *,
        timing: RegisterTiming | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self._node = node_name
        self._source = source
        self._state = state
        self._settings = settings
        self._timing = timing or RegisterTiming()
        self._sleep = sleep
        self._clock = clock
        self._asymmetry_reported_at: dict[tuple[str, str], float] = {}

    async def sync_once(self) -> bool:
        """One round: discover, compare, patch if needed. Returns whether the node was patched."""
        gpus = await asyncio.to_thread(self._source.discover)
        await self._state.set_gpus(gpus)
        snapshot = self._state.snapshot()
        desired, asymmetric = desired_annotations(snapshot.gpus, self._settings, snapshot.unhealthy)
        node = await self._cluster.get_node(self._node)
        await self._report_asymmetry(node, asymmetric)
        current = node.metadata.annotations
        changes: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
        if not changes:
            return False
        await self._cluster.patch_node_annotations(self._node, changes)
        log.info("node %s: registered %s", self._node, desired[keys.NVIDIA_REGISTER])
        return True

    async def _report_asymmetry(self, node: Node, asymmetric: list[Asymmetry]) -> None:
        """A Warning event ``AsymmetricGPUP2PLink`` on the node per asymmetric pair, at most once an hour (as HAMi)."""
        now = self._clock()
        for item in asymmetric:
            pair = (item.a, item.b)
            last = self._asymmetry_reported_at.get(pair)
            if last is not None and now - last < ASYMMETRY_EVENT_INTERVAL:
                continue
            self._asymmetry_reported_at[pair] = now
            message = (
                f"GPUs {item.a} and {item.b} report different P2P links to each other "
                f"({_links(item.a_to_b)} vs {_links(item.b_to_a)}); their topology score is 0"
            )
            log.warning("node %s: %s", self._node, message)
            try:
                await self._cluster.emit_event(
                    ObjectRef.for_node(node), EventType.WARNING, "AsymmetricGPUP2PLink", message, EVENT_COMPONENT
                )
            except HamiError as exc:
                log.warning("node %s: cannot record event AsymmetricGPUP2PLink: %s", self._node, exc)

    async def run(self) -> None:
        """Register forever (until cancelled). Errors are logged and retried; they never end the loop."""
        while True:
            seen = self._state.version
            try:
                await self.sync_once()
                delay = self._timing.interval
            except (HamiError, OSError) as exc:
                log.error("node %s: registration failed, retrying in %gs: %s", self._node, self._timing.retry, exc)
                delay = self._timing.retry
            await sleep_or_change(self._state, seen, delay, self._sleep)
