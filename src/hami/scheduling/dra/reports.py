"""What the DRA ledger reports: problems (what it cannot count as it should) and warnings (configuration traps).

``DraProblem`` and ``DraWarning`` are plain values, compared by content, so the shell can tell a newly raised one
from one already reported. The warnings' texts say what each trap will do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hami.config.dra import DraDriverConfig
from hami.protocol.dra import ResourceSlice
from hami.scheduling.dra.mapping import DraDevice, ProblemKind

__all__ = ["DraProblem", "DraWarning", "WarningKind", "cores_warning", "extended_resource_warning"]


@dataclass(frozen=True, slots=True)
class DraProblem:
    """Something hami cannot count as it should; ``object`` reads ``ResourceClaim ns/name`` or ``ResourceSlice
    name``, ``node`` is "" when unknown, ``message`` says what is (not) counted."""

    kind: ProblemKind
    object: str
    node: str
    message: str


class WarningKind(enum.StrEnum):
    EXTENDED_RESOURCE = "extended-resource"
    """A DeviceClass serves one of hami's resource names from DRA."""
    CORES_WHOLE_CARD = "cores-whole-card"
    """Shared devices whose cores capacity defaults to the whole card."""
    UNKNOWN_VENDOR = "unknown-vendor"
    """A configured driver maps to a vendor key hami does not schedule."""


@dataclass(frozen=True, slots=True)
class DraWarning:
    """A configuration trap, with what it will do."""

    kind: WarningKind
    object: str
    message: str


def extended_resource_warning(name: str, resource: str) -> DraWarning:
    """A DeviceClass ``name`` whose ``extendedResourceName`` is ``resource``, one of hami's resources."""
    return DraWarning(
        WarningKind.EXTENDED_RESOURCE,
        f"DeviceClass {name}",
        f"extendedResourceName {resource} is a resource hami manages: kube-scheduler serves {resource} from "
        f"DRA (this class) on every node whose allocatable lacks it, even when hami's extender marks it "
        f"ignoredByScheduler; a pod asking {resource} there gets a DRA claim instead of a hami allocation, "
        f"counted by hami only if the class's driver is listed under dra.drivers",
    )


def cores_warning(sl: ResourceSlice, devices: list[DraDevice], cfg: DraDriverConfig) -> DraWarning | None:
    """A warning when shared devices of the slice default their cores capacity to the whole card."""
    whole = [d for d in devices if d.shared and d.cores is not None and d.cores.default >= d.cores.value > 0]
    if not whole:
        return None
    names = ", ".join(d.key[2] for d in whole[:4]) + (", …" if len(whole) > 4 else "")
    return DraWarning(
        WarningKind.CORES_WHOLE_CARD,
        f"ResourceSlice {sl.metadata.name}",
        f"{len(whole)} shared device(s) of driver {cfg.driver} on node {sl.spec.node_name or '?'} ({names}) "
        f"consume their whole {cfg.cores_capacity!r} capacity by default: a claim that asks only memory takes "
        f"all of the card's cores, so no other claim and no hami pod asking cores can use it (give the capacity "
        f"a requestPolicy default, or have claims ask for {cfg.cores_capacity!r})",
    )
