"""Which cards hami's DRA plugin holds back from claims because pods of the device plugin hold shares of them
(docs/dra-mode-switching.md).

kube-scheduler allocates claims from the slice alone: it does not see the pods hami's extender placed through the
device plugin (allocation annotations). On a node switched to DRA while such pods still run (``helm upgrade`` with
pods running, a node switched without a drain), the plugin publishes every card such a pod holds with the
``NoSchedule`` device taint ``hami.io/device-plugin-pods``, so kube-scheduler allocates no new claim there; the
taint goes when the last such pod is gone. A whole card is held back, not the pods' part of it (see the page for
why the capacity is not reduced instead).

Pure: the pods bound to this node in, the cards they hold out. A pod counts as hami's ledger counts it
(``hami.scheduling.records.believed_node``): placed by hami (``hami.io/vgpu-node``), served by one of hami's
scheduler names, not finished. Its cards come from the NVIDIA allocation annotation (the to-allocate one when the
allocated one cannot be decoded). A pod whose allocation cannot be read at all holds back every card of the node:
which card it uses is unknown.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.allocation import PodDevices, decode_pod_devices
from hami.protocol.objects import Pod
from hami.scheduling.records import believed_node

__all__ = ["HELD_BACK_TAINT", "Holders", "device_plugin_holders", "held_back_taint"]

HELD_BACK_TAINT: Final = keys.DEVICE_PLUGIN_PODS_TAINT
_KEYS: Final = keys.NVIDIA_KEYS


@dataclass(frozen=True, slots=True)
class Holders:
    """The cards pods of the device plugin hold on one node.

    ``cards``: card UUID → the pods holding part of it (``namespace/name``, sorted); ``unreadable``: pods whose
    allocation cannot be decoded (then every card is held back)."""

    cards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()

    def held_back(self, uuids: Iterable[str]) -> frozenset[str]:
        """Of the node's cards ``uuids``, those no new claim may be allocated on."""
        if self.unreadable:
            return frozenset(uuids)
        return frozenset(u for u in uuids if u in self.cards)

    def why(self, uuid: str) -> str:
        """For the log: the pods that hold ``uuid`` back."""
        if self.unreadable:
            return "the allocation of " + ", ".join(self.unreadable) + " cannot be read (every card is held back)"
        return "used by " + ", ".join(self.cards.get(uuid, ()))


def _allocation(pod: Pod) -> PodDevices:
    """The pod's NVIDIA devices; raises ``InvalidInput`` when neither allocation annotation can be decoded."""
    annotations = pod.metadata.annotations
    allocated = annotations.get(_KEYS.allocated)
    to_allocate = annotations.get(_KEYS.to_allocate) if _KEYS.to_allocate else None
    if allocated:
        try:
            return decode_pod_devices(allocated, _KEYS.allocated)
        except InvalidInput:
            if not to_allocate:
                raise
    if to_allocate and _KEYS.to_allocate:
        return decode_pod_devices(to_allocate, _KEYS.to_allocate)
    return ()


def device_plugin_holders(pods: Iterable[Pod], node: str, schedulers: Collection[str]) -> Holders:
    """The cards of ``node`` held by the believed device-plugin pods among ``pods`` (module docstring)."""
    cards: dict[str, set[str]] = {}
    unreadable: list[str] = []
    for pod in pods:
        if believed_node(pod, schedulers) != node:
            continue
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        try:
            devices = _allocation(pod)
        except InvalidInput:
            unreadable.append(name)
            continue
        for container in devices:
            for device in container:
                cards.setdefault(device.uuid.split("[", 1)[0], set()).add(name)  # a legacy MIG UUID: its card
    return Holders({u: tuple(sorted(p)) for u, p in sorted(cards.items())}, tuple(sorted(unreadable)))


def held_back_taint() -> dict[str, Any]:
    """The device taint of a held-back card."""
    return {"key": HELD_BACK_TAINT, "value": "true", "effect": "NoSchedule"}
