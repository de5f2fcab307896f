"""What a vendor does at pod admission: report whether a container asks for its devices, and add defaults.

HAMi calls every backend's ``MutateAdmission(container, pod)`` for every container (webhook-bind-plugin-vendors.md
§1.3). Here a vendor's ``Admitter`` looks at one container and writes what it wants changed into a
``ContainerEdit`` (limits to add, environment variables to set); it never touches the pod itself. The webhook
turns the edits into a targeted JSON patch. Most vendors only report "found" when their count resource is
in the container's limits (``CountInLimits``); NVIDIA adds defaults (``hami.devices.nvidia.admission``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hami.protocol.objects import Container, QuantityValue

__all__ = ["Admitter", "ContainerEdit", "CountInLimits", "lookup"]


@dataclass(slots=True)
class ContainerEdit:
    """Changes to one container, in the order they were decided.

    * ``limits`` — ``resources.limits`` entries to add (quantity text); never replaces an existing limit;
    * ``env`` — environment variables to set (name → value).
    """

    limits: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.limits or self.env)


def lookup(container: Container, edit: ContainerEdit, name: str) -> tuple[str, QuantityValue] | None:
    """``(where, value)`` of resource ``name`` — limits (including ones added by ``edit``) first, then
    requests; None when absent or when ``name`` is empty (a resource the config switched off)."""
    if not name:
        return None
    if name in edit.limits:
        return "limits", edit.limits[name]
    if name in container.resources.limits:
        return "limits", container.resources.limits[name]
    if name in container.resources.requests:
        return "requests", container.resources.requests[name]
    return None


class Admitter(Protocol):
    """One vendor's admission behaviour."""

    @property
    def runtime_class_name(self) -> str:
        """The pod's ``runtimeClassName`` when it uses this vendor and has none ("" = leave it)."""

    def admit(self, container: Container, field: str, edit: ContainerEdit) -> bool:
        """Record this vendor's changes to ``container`` in ``edit``; True when it uses the vendor's devices.

        ``field`` names the container in errors (``containers[0](train)``). Raises ``InvalidInput`` for a value
        the vendor refuses. Pure: reads ``container``, writes only ``edit``.
        """


@dataclass(frozen=True, slots=True)
class CountInLimits:
    """A vendor whose only admission rule is "found iff the count resource is in limits" (HAMi's Hygon, MLU…)."""

    count: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit) -> bool:
        return bool(self.count) and (self.count in container.resources.limits or self.count in edit.limits)
