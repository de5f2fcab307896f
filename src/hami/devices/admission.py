"""What a vendor does at pod admission: report whether a container asks for its devices, and add defaults.

HAMi calls every backend's ``MutateAdmission(container, pod)`` for every container (webhook-bind-plugin-vendors.md
§1.3). Here a vendor's ``Admitter`` looks at one container (and, read-only, at the pod: ``PodContext``) and
writes what it wants changed into a ``ContainerEdit`` (limits and requests to set, environment variables to set,
pod annotations to set); it never touches the pod itself. The webhook turns the edits into a targeted JSON patch
(``add`` for a value that is absent, ``replace`` for one that differs; ``resources.requests`` and
``metadata.annotations`` are created when absent). Every vendor's admitter sees every container, init containers
first, in registry order; one ``ContainerEdit`` per container is shared by the vendors, and ``PodContext``
shows the annotations set by the edits of earlier containers and vendors. Most vendors only report "found" when
their count resource is in the container's limits (``CountInLimits``); NVIDIA adds defaults
(``hami.devices.nvidia.admission``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hami.protocol.objects import Container, QuantityValue

__all__ = ["Admitter", "ContainerEdit", "CountInLimits", "PodContext", "lookup"]


@dataclass(slots=True)
class ContainerEdit:
    """Changes to one container and its pod, in the order they were decided.

    * ``limits`` / ``requests`` — ``resources.limits`` / ``resources.requests`` entries to set (quantity text):
      added when absent, replaced when the container has another value (a vendor that only adds defaults, as
      NVIDIA does, writes only names the container does not have);
    * ``env`` — environment variables to set (name → value);
    * ``annotations`` — pod annotations to set (name → value), added or replaced.
    """

    limits: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.limits or self.env or self.requests or self.annotations)


@dataclass(frozen=True, slots=True)
class PodContext:
    """The pod an admitted container belongs to, read-only: its name (may be empty for a generated name), its
    namespace and its annotations — including those set by the edits of earlier containers and vendors."""

    name: str = ""
    namespace: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)


def lookup(container: Container, edit: ContainerEdit, name: str) -> tuple[str, QuantityValue] | None:
    """``(where, value)`` of resource ``name`` — limits (the ones set by ``edit`` first) first, then requests
    (likewise); None when absent or when ``name`` is empty (a resource the config switched off)."""
    if not name:
        return None
    if name in edit.limits:
        return "limits", edit.limits[name]
    if name in container.resources.limits:
        return "limits", container.resources.limits[name]
    if name in edit.requests:
        return "requests", edit.requests[name]
    if name in container.resources.requests:
        return "requests", container.resources.requests[name]
    return None


class Admitter(Protocol):
    """One vendor's admission behaviour."""

    @property
    def runtime_class_name(self) -> str:
        """The pod's ``runtimeClassName`` when it uses this vendor and has none ("" = leave it)."""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        """Record this vendor's changes to ``container`` (and its pod's annotations) in ``edit``; True when it uses
        the vendor's devices.

        ``field`` names the container in errors (``containers[0](train)``); ``pod`` is the pod as edited so far.
        Raises ``InvalidInput`` for a value the vendor refuses (the pod is denied with its message). Pure: reads
        ``container`` and ``pod``, writes only ``edit``.
        """


@dataclass(frozen=True, slots=True)
class CountInLimits:
    """A vendor whose only admission rule is "found iff the count resource is in limits" (HAMi's Hygon, MLU…)."""

    count: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        return bool(self.count) and (self.count in container.resources.limits or self.count in edit.limits)
