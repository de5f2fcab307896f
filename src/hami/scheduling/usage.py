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
several instances of one MIG GPU holds them all at once, so its own entries on a device are summed first.
HAMi has no sidecars (it treats them as init containers, which under-counts a GPU sidecar); for pods without
sidecars and without several MIG instances in one init container the result equals HAMi's
``CollapseInitContainerUsage``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami.protocol.allocation import PodDevices
from hami.protocol.objects import Pod

__all__ = ["Charge", "Kind", "container_kinds", "effective_charges"]


class Kind(enum.Enum):
    INIT = "init"
    SIDECAR = "sidecar"
    APP = "app"


def container_kinds(pod: Pod) -> tuple[Kind, ...]:
    """One kind per container, init containers first (the order of allocation annotations)."""
    init = tuple(Kind.SIDECAR if c.restart_policy == "Always" else Kind.INIT for c in pod.spec.init_containers)
    return init + (Kind.APP,) * len(pod.spec.containers)


@dataclass(frozen=True, slots=True)
class Charge:
    """Usage one pod holds on one device: slots (tasks), MiB, core units."""

    vendor: str
    uuid: str
    slots: int
    mem: int
    cores: int


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
        # uuid -> [peak_mem, peak_cores, peak_slots,   (regular init containers, each beside earlier sidecars)
        #          side_mem, side_cores, side_slots,   (sidecars started so far)
        #          app_mem, app_cores, app_slots]
        acc: dict[str, list[int]] = {}
        for pos, container in enumerate(devices[vendor]):
            kind = kinds[pos] if pos < len(kinds) else Kind.APP
            if kind is Kind.INIT and init_done:
                continue
            own: dict[str, list[int]] = {}  # this container's usage per device: MiB, cores, slots
            for dev in container:
                o = own.setdefault(dev.uuid, [0, 0, 0])
                o[0] += dev.usedmem
                o[1] += dev.usedcores
                o[2] += 1
            for uuid, (mem, cores, slots) in own.items():
                a = acc.get(uuid)
                if a is None:
                    a = acc[uuid] = [0] * 9
                if kind is Kind.INIT:
                    a[0] = max(a[0], a[3] + mem)
                    a[1] = max(a[1], a[4] + cores)
                    a[2] = max(a[2], a[5] + slots)
                elif kind is Kind.SIDECAR:
                    a[3] += mem
                    a[4] += cores
                    a[5] += slots
                else:
                    a[6] += mem
                    a[7] += cores
                    a[8] += slots
        for uuid in sorted(acc):
            a = acc[uuid]
            out.append(
                Charge(
                    vendor,
                    uuid,
                    slots=max(a[2], a[5] + a[8], 1),
                    mem=max(a[0], a[3] + a[6]),
                    cores=max(a[1], a[4] + a[7]),
                )
            )
    return tuple(out)
