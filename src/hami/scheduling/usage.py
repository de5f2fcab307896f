"""From a pod's per-container allocation to the usage it holds on each device (scheduler-core.md §7.2).

Containers run in three ways, and their devices are charged accordingly, per device and per dimension:

* regular **init** containers run one after another → the largest of them counts (``max``), one slot;
* **sidecar** init containers (``restartPolicy: Always``) keep running beside everything after them → summed;
* **app** containers run together → summed, one slot each.

Effective usage = the peak over the pod's phases, per device and per dimension: each regular init container
together with the sidecars started *before* it, and finally all sidecars together with the app containers. (A
sidecar declared after an init container starts only once that init container has finished, so the two never
hold the device at the same time; charging ``sidecars + max(init, app)`` would over-count, and more than the
fit — which tries each init container beside the earlier sidecars only — ever checked.) A container holding
several slices of one partitioned device holds them all at once, so its own entries on a device are summed first.
HAMi has no sidecars (it treats them as init containers, which under-counts a GPU sidecar); for pods without
sidecars and without several slices of one device in one init container the result equals HAMi's
``CollapseInitContainerUsage``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.objects import Pod

__all__ = ["Charge", "Kind", "app_charges", "container_kinds", "effective_charges"]


class Kind(enum.Enum):
    INIT = "init"
    SIDECAR = "sidecar"
    APP = "app"


def container_kinds(pod: Pod) -> tuple[Kind, ...]:
    """One kind per container, init containers first (the order of allocation annotations)."""
    init = tuple(Kind.SIDECAR if c.restart_policy == "Always" else Kind.INIT for c in pod.spec.init_containers)
    return init + (Kind.APP,) * len(pod.spec.containers)


class Charge(msgspec.Struct, frozen=True, gc=False):
    """Usage one pod holds on one device: slots (tasks), MiB, core units.

    A frozen struct untracked by the cyclic collector (it holds two strings and three numbers): the ledger keeps one
    per placed pod and device, 56 bytes each instead of a slotted dataclass's 72.
    """

    vendor: str
    uuid: str
    slots: int
    mem: int
    cores: int


@dataclass(slots=True)
class _Usage:
    """One container's usage of one device, or a sum or peak of such: MiB, core units, slots."""

    mem: int = 0
    cores: int = 0
    slots: int = 0

    def add(self, other: _Usage) -> None:
        self.mem += other.mem
        self.cores += other.cores
        self.slots += other.slots


@dataclass(slots=True)
class _Phases:
    """A pod's usage of one device by phase: ``init`` the peak of the regular init containers (each beside the
    sidecars started before it), ``sidecars`` the sidecars started so far, ``apps`` the app containers."""

    init: _Usage
    sidecars: _Usage
    apps: _Usage

    def add(self, kind: Kind, own: _Usage) -> None:
        if kind is Kind.INIT:
            side, peak = self.sidecars, self.init
            peak.mem = max(peak.mem, side.mem + own.mem)
            peak.cores = max(peak.cores, side.cores + own.cores)
            peak.slots = max(peak.slots, side.slots + own.slots)
        elif kind is Kind.SIDECAR:
            self.sidecars.add(own)
        else:
            self.apps.add(own)

    def charge(self, vendor: str, uuid: str) -> Charge:
        init, side, apps = self.init, self.sidecars, self.apps
        return Charge(
            vendor,
            uuid,
            slots=max(init.slots, side.slots + apps.slots, 1),
            mem=max(init.mem, side.mem + apps.mem),
            cores=max(init.cores, side.cores + apps.cores),
        )


def effective_charges(
    devices: Mapping[str, PodDevices], kinds: Sequence[Kind], init_done: bool = False
) -> tuple[Charge, ...]:
    """Collapse a pod's allocation into one ``Charge`` per (vendor, device), sorted by vendor then UUID.

    ``kinds`` gives each container's kind by position; containers beyond it count as app containers (so a
    pod whose spec is unknown is charged conservatively). With ``init_done`` (every init container finished)
    regular init containers no longer count (HAMi's ``AppContainersOnlyDeviceUsage``).
    """
    out: list[Charge] = []
    for vendor in sorted(devices):
        acc: dict[str, _Phases] = {}
        for pos, container in enumerate(devices[vendor]):
            kind = kinds[pos] if pos < len(kinds) else Kind.APP
            if kind is Kind.INIT and init_done:
                continue
            for uuid, own in _per_device(container).items():
                phases = acc.get(uuid)
                if phases is None:
                    phases = acc[uuid] = _Phases(_Usage(), _Usage(), _Usage())
                phases.add(kind, own)
        out.extend(acc[uuid].charge(vendor, uuid) for uuid in sorted(acc))
    return tuple(out)


def app_charges(devices: Mapping[str, PodDevices]) -> tuple[Charge, ...]:
    """``effective_charges`` of a pod whose containers are all app containers (no init containers), which is the
    sum over its containers per device — computed without the phases (the watch reads every pod this way)."""
    if len(devices) == 1:  # the common pod: one vendor, one container, one device
        ((vendor, containers),) = devices.items()
        if len(containers) == 1 and len(containers[0]) == 1:
            dev = containers[0][0]
            return (Charge(vendor, dev.uuid, 1, max(dev.usedmem, 0), max(dev.usedcores, 0)),)
    out: list[Charge] = []
    for vendor in sorted(devices) if len(devices) > 1 else devices:
        acc: dict[str, list[int]] = {}  # uuid -> [slots, mem, cores]
        for container in devices[vendor]:
            for dev in container:
                sums = acc.get(dev.uuid)
                if sums is None:
                    acc[dev.uuid] = [1, dev.usedmem, dev.usedcores]
                else:
                    sums[0] += 1
                    sums[1] += dev.usedmem
                    sums[2] += dev.usedcores
        for uuid in sorted(acc) if len(acc) > 1 else acc:
            slots, mem, cores = acc[uuid]
            out.append(Charge(vendor, uuid, slots, max(mem, 0), max(cores, 0)))
    return tuple(out)


def _per_device(container: Sequence[ContainerDevice]) -> dict[str, _Usage]:
    """One container's usage per device (several slices of one device are held at once: summed)."""
    own: dict[str, _Usage] = {}
    for dev in container:
        o = own.get(dev.uuid)
        if o is None:
            own[dev.uuid] = _Usage(dev.usedmem, dev.usedcores, 1)
        else:
            o.mem += dev.usedmem
            o.cores += dev.usedcores
            o.slots += 1
    return own
