"""From a pod's per-container allocation to the usage it holds on each device (scheduler-core.md §7.2).

Containers run in three ways, and their devices are charged accordingly, per device and per dimension:

* regular **init** containers run one after another → the largest of them counts (``max``), one slot;
* **sidecar** init containers (``restartPolicy: Always``) keep running beside everything after them → summed;
* **app** containers run together → summed, one slot each.

Effective usage = sidecars + max(init, app). HAMi has no sidecars (it treats them as init containers, which
under-counts a GPU sidecar); for pods without sidecars the result equals HAMi's ``CollapseInitContainerUsage``.
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
        # uuid -> [init_mem, init_cores, side_mem, side_cores, side_slots, app_mem, app_cores, app_slots, has_init]
        acc: dict[str, list[int]] = {}
        for pos, container in enumerate(devices[vendor]):
            kind = kinds[pos] if pos < len(kinds) else Kind.APP
            if kind is Kind.INIT and init_done:
                continue
            for dev in container:
                a = acc.get(dev.uuid)
                if a is None:
                    a = acc[dev.uuid] = [0] * 9
                if kind is Kind.INIT:
                    a[0] = max(a[0], dev.usedmem)
                    a[1] = max(a[1], dev.usedcores)
                    a[8] = 1
                elif kind is Kind.SIDECAR:
                    a[2] += dev.usedmem
                    a[3] += dev.usedcores
                    a[4] += 1
                else:
                    a[5] += dev.usedmem
                    a[6] += dev.usedcores
                    a[7] += 1
        for uuid in sorted(acc):
            a = acc[uuid]
            out.append(
                Charge(
                    vendor,
                    uuid,
                    slots=max(a[4] + max(a[8], a[7]), 1),
                    mem=a[2] + max(a[0], a[5]),
                    cores=a[3] + max(a[1], a[6]),
                )
            )
    return tuple(out)
