"""From a pod's annotations to its ledger record (scheduler-core.md §7.1).

Pods that carry ``hami.io/vgpu-node`` hold devices: each vendor's *allocated* annotation is decoded (the
to-allocate annotation is consumed by device plugins and may be partly emptied) together with the slices the
pod holds on partitioned devices (each vendor's ``decode_slices``).

A pod whose annotation cannot be decoded is **not** dropped (HAMi drops it, spec §7.1 step 3): it gets a
record with ``problem`` set, so callers report it (``hami_pods_undecodable``, logs). It is charged for every
vendor whose allocation decodes and, for one that does not, from the to-allocate annotation when that is intact.
When neither says which devices the pod holds, nothing can be charged to a device: the record keeps the pod
visible (it is reported on every update) until its annotations are repaired or it ends.

**What is believed** (``believed_node``; docs/trust.md). Annotations are written by whoever may update the pod, so
they are charged only when they can be trusted. A bound pod is charged to ``spec.nodeName`` (set by a Binding,
which only a scheduler may create), never to the node ``hami.io/vgpu-node`` names. A pod is charged only when it
is served by hami's scheduler (``spec.schedulerName``, immutable, is one of hami's): the chart's admission policy
lets only hami's scheduler write the allocation annotations, so on such a pod they are hami's (or HAMi's, before a
switch). A pod this process reserved itself (its own /filter decision, ``ours``) is charged whatever its
scheduler name, as long as the reservation stands. Anything else (a pod of another scheduler carrying copied or
forged annotations) charges no card. HAMi believes every pod that carries ``hami.io/vgpu-node``.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Hashable, Mapping
from typing import Final

from hami.devices.base import Vendor
from hami.devices.common import reads_slices
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.disruption import terminating_by_preemption
from hami.protocol.objects import Pod
from hami.scheduling.state import OneVendor, PodRecord
from hami.scheduling.usage import app_charges, container_kinds, effective_charges

__all__ = [
    "HAMI_SCHEDULER",
    "RecordReader",
    "believed_node",
    "holds_devices",
    "init_containers_done",
    "is_terminal",
    "pod_group",
    "record_from_pod",
]

_TERMINAL = frozenset({"Succeeded", "Failed"})
HAMI_SCHEDULER: Final = "hami-scheduler"
"""``--scheduler-name``'s default: the scheduler name whose pods are believed when no other is given."""


def is_terminal(pod: Pod) -> bool:
    """A finished pod holds no devices any more."""
    return pod.status.phase in _TERMINAL


def pod_group(pod: Pod) -> str:
    """The PodGroup the pod belongs to (label ``scheduling.x-k8s.io/pod-group``, else
    ``spec.schedulingGroup.podGroupName``), or ``""``: its Bind waits for a locked node (spec webhook §3.1)."""
    group = pod.metadata.labels.get(keys.POD_GROUP_LABEL, "")
    if not group and pod.spec.scheduling_group is not None:
        group = pod.spec.scheduling_group.pod_group_name
    return group


def holds_devices(pod: Pod) -> bool:
    """Whether hami (or HAMi) placed this pod: it carries ``hami.io/vgpu-node``."""
    return bool(pod.metadata.annotations.get(keys.VGPU_NODE))


def believed_node(pod: Pod, schedulers: Collection[str], *, ours: bool = False) -> str | None:
    """The node the pod's allocation is charged to, or None when it charges nothing (module docstring).

    ``schedulers``: hami's scheduler names (``--scheduler-name``); ``ours``: this process reserved the pod itself.
    A finished pod and one without ``hami.io/vgpu-node`` hold nothing; a pod neither served by hami's scheduler nor
    ``ours`` is not believed; a bound pod is on ``spec.nodeName``; an unbound one on the node hami chose for it.
    """
    chosen = pod.metadata.annotations.get(keys.VGPU_NODE)
    if not chosen or pod.status.phase in _TERMINAL:
        return None
    if not ours and pod.spec.scheduler_name not in schedulers:
        return None
    return pod.spec.node_name or chosen


def init_containers_done(pod: Pod) -> bool:
    """Every regular init container terminated with exit code 0 (HAMi's "released" condition)."""
    regular = {c.name for c in pod.spec.init_containers if c.restart_policy != "Always"}
    if not regular:
        return False
    done = set()
    for status in pod.status.init_container_statuses:
        terminated = status.state.get("terminated")
        if terminated is not None and terminated.get("exitCode") == 0:
            done.add(status.name)
    return regular <= done


def _from_to_allocate(pod: Pod, vendor: Vendor) -> PodDevices | None:
    """The to-allocate annotation as a stand-in for an undecodable allocated one, if it decodes and is still
    complete (a device plugin empties its slots as containers start, so a partly consumed one is not used)."""
    key = vendor.keys.to_allocate
    value = pod.metadata.annotations.get(key) if key else None
    if not key or not value:
        return None
    try:
        decoded = vendor.decode(value, key)
    except InvalidInput:
        return None
    return decoded if any(decoded) else None


def record_from_pod(
    pod: Pod,
    vendors: Mapping[str, Vendor],
    schedulers: Collection[str] = (HAMI_SCHEDULER,),
    *,
    ours: bool = False,
) -> PodRecord | None:
    """The ledger record for a placed, non-terminal pod whose allocation is believed (``believed_node``); None
    when the pod holds no devices or is not believed.

    Works out the vendors' keys afresh on every call: a caller that reads many pods (the watch, the audit, the
    simulator) keeps one :class:`RecordReader` instead.
    """
    return RecordReader(vendors, schedulers).read(pod, ours=ours)


class RecordReader:
    """``record_from_pod`` for one set of vendors, with what does not depend on the pod worked out once (issue 19,
    cold start: a list of 100,000 pods is read in one go).

    Per pod it looks only at the allocation annotations the pod carries (not at every vendor's), asks only the
    vendors that read slices from annotations (``reads_slices``) for them, and charges a pod without init
    containers by summing its containers' devices (what ``effective_charges`` gives when every container is an
    app container). The record is the one the per-vendor walk gives: devices in the vendors' order, slices and
    charges in the same order, the same problem text.
    """

    __slots__ = ("_allocated", "_slicers", "schedulers", "vendors")

    def __init__(self, vendors: Mapping[str, Vendor], schedulers: Collection[str] = (HAMI_SCHEDULER,)) -> None:
        self.vendors = vendors
        self.schedulers = frozenset(schedulers)
        """hami's scheduler names: the pods it believes (``believed_node``)"""
        allocated: dict[str, list[tuple[int, str, Vendor]]] = {}
        for i, (name, vendor) in enumerate(vendors.items()):
            allocated.setdefault(vendor.keys.allocated, []).append((i, name, vendor))
        self._allocated = allocated
        """allocation annotation key → the vendors reading it, with their position in ``vendors``"""
        self._slicers = [(name, vendor) for name, vendor in sorted(vendors.items()) if reads_slices(vendor)]

    def read(self, pod: Pod, *, ours: bool = False) -> PodRecord | None:
        """The pod's record, or None (``believed_node``; ``ours``: this process reserved the pod itself)."""
        annotations = pod.metadata.annotations
        node = believed_node(pod, self.schedulers, ours=ours)
        if node is None:
            return None
        devices, problems = self._devices(pod)
        slices: list[tuple[str, str, Hashable]] = []
        for name, vendor in self._slicers:  # in reserve's order (sorted), so equal records compare equal
            try:
                held = vendor.decode_slices(annotations)
            except InvalidInput as err:
                problems.append(str(err))
                continue
            if held:
                slices += [(name, uuid, position) for uuid, position in held]
        if pod.spec.init_containers:
            charges = effective_charges(devices, container_kinds(pod), init_done=init_containers_done(pod))
        else:
            charges = app_charges(devices)
        meta = pod.metadata
        return PodRecord(
            meta.uid,
            sys.intern(meta.namespace),  # shared by many records: one string each (state size)
            meta.name,
            sys.intern(node),
            OneVendor(*devices.popitem()) if len(devices) == 1 else devices,
            charges,
            tuple(slices),
            "; ".join(problems) or None,
            pod.spec.priority or 0,
            pod.status.start_time,
            meta.deletion_timestamp is not None,
            terminating_by_preemption(pod),
        )

    def _devices(self, pod: Pod) -> tuple[dict[str, PodDevices], list[str]]:
        """Each vendor's decoded allocation (in the vendors' order) and what could not be decoded."""
        annotations = pod.metadata.annotations
        found = [hit for key in annotations if key in self._allocated for hit in self._allocated[key]]
        if len(found) > 1:
            found.sort(key=lambda hit: hit[0])
        devices: dict[str, PodDevices] = {}
        problems: list[str] = []
        for _, name, vendor in found:
            key = vendor.keys.allocated
            try:
                devices[name] = vendor.decode(annotations[key], key)
            except InvalidInput as err:
                problems.append(str(err))
                fallback = _from_to_allocate(pod, vendor)
                if fallback is not None:
                    devices[name] = fallback
                    problems.append(f"charged from {vendor.keys.to_allocate} instead")
        return devices, problems
