"""From a pod's annotations to its ledger record (scheduler-core.md §7.1).

Pods that carry ``hami.io/vgpu-node`` hold devices: each vendor's *allocated* annotation is decoded (the
to-allocate annotation is consumed by device plugins and may be partly emptied) together with the slices the
pod holds on partitioned devices (each vendor's ``decode_slices``).

A pod whose annotation cannot be decoded is **not** dropped (HAMi drops it, spec §7.1 step 3): it gets a
record with ``problem`` set, so callers report it (``hami_pods_undecodable``, logs). It is charged for every
vendor whose allocation decodes and, for one that does not, from the to-allocate annotation when that is intact.
When neither says which devices the pod holds, nothing can be charged to a device: the record keeps the pod
visible (it is reported on every update) until its annotations are repaired or it ends.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping

from hami.devices.base import Vendor
from hami.devices.common import reads_slices
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.disruption import terminating_by_preemption
from hami.protocol.objects import Pod
from hami.scheduling.state import OneVendor, PodRecord
from hami.scheduling.usage import app_charges, container_kinds, effective_charges

__all__ = ["RecordReader", "holds_devices", "init_containers_done", "is_terminal", "pod_group", "record_from_pod"]

_TERMINAL = frozenset({"Succeeded", "Failed"})


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


def record_from_pod(pod: Pod, vendors: Mapping[str, Vendor]) -> PodRecord | None:
    """The ledger record for a placed, non-terminal pod; None when the pod holds no devices.

    Works out the vendors' keys afresh on every call: a caller that reads many pods (the watch, the audit, the
    simulator) keeps one :class:`RecordReader` instead.
    """
    return RecordReader(vendors).read(pod)


class RecordReader:
    """``record_from_pod`` for one set of vendors, with what does not depend on the pod worked out once (issue 19,
    cold start: a list of 100,000 pods is read in one go).

    Per pod it looks only at the allocation annotations the pod carries (not at every vendor's), asks only the
    vendors that read slices from annotations (``reads_slices``) for them, and charges a pod without init
    containers by summing its containers' devices (what ``effective_charges`` gives when every container is an
    app container). The record is the one the per-vendor walk gives: devices in the vendors' order, slices and
    charges in the same order, the same problem text.
    """

    __slots__ = ("_allocated", "_slicers", "vendors")

    def __init__(self, vendors: Mapping[str, Vendor]) -> None:
        self.vendors = vendors
        allocated: dict[str, list[tuple[int, str, Vendor]]] = {}
        for i, (name, vendor) in enumerate(vendors.items()):
            allocated.setdefault(vendor.keys.allocated, []).append((i, name, vendor))
        self._allocated = allocated
        """allocation annotation key → the vendors reading it, with their position in ``vendors``"""
        self._slicers = [(name, vendor) for name, vendor in sorted(vendors.items()) if reads_slices(vendor)]

    def read(self, pod: Pod) -> PodRecord | None:
        annotations = pod.metadata.annotations
        node = annotations.get(keys.VGPU_NODE)
        if not node or pod.status.phase in _TERMINAL:
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
