"""Devices derived from ``node.status.capacity``, for vendors whose device plugin registers no inventory annotation.

Cambricon's and Moore Threads' device plugins advertise only extended resources: a core resource counting core
units over all cards (100 per MLU, 16 per Moore Threads card) and a memory resource counting memory units over all
cards (256 MiB, 512 MiB). HAMi rebuilds the cards from those two numbers (webhook-bind-plugin-vendors.md §7):
``ceil(core units / units per card)`` cards, each with ``memory units × unit MiB × units per card // core units``
MiB, id ``<node>-<suffix>-<i>``, index ``i``, NUMA 0, always healthy. The ids are hami's (HAMi's) own, so a vendor
can read a card's index back from its id (``synthesized_index``).

Deliberate differences from HAMi: a capacity that is not a whole non-negative number, a card count above
``MAX_DEVICES`` or a per-card memory beyond int32 is refused with the resource and the value (the scheduler
quarantines that vendor on that node); HAMi reads such values as 0 or lets the int32 wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami.devices.resources import INT32_TOO_LARGE, lookup_resource, whole_quantity
from hami.errors import InvalidInput, QuantityError
from hami.protocol.inventory import MAX_DEVICES, DeviceInfo
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.quantity import INT32_MAX, INT64_MAX, quantity_as_int

__all__ = ["CapacityLayout", "capacity_whole", "synthesized_index", "unit_hint", "unit_memory"]

_MIB = 1 << 20


def capacity_whole(node: Node, resource: str) -> int | None:
    """``node.status.capacity[resource]`` as a whole non-negative number; None when absent (or ``resource`` is
    empty: a resource the config switched off). Raises ``QuantityError`` naming the capacity entry."""
    if not resource:
        return None
    raw = node.status.capacity.get(resource)
    if raw is None:
        return None
    return whole_quantity(f"status.capacity[{resource}]", raw, INT64_MAX, "is outside the int64 range")


def unit_memory(container: Container, field: str, name: str, unit_mib: int) -> int:
    """MiB of the memory resource ``name`` that counts ``unit_mib`` MiB units (Cambricon 256, Moore Threads 512): the
    container's whole number of units × ``unit_mib``; 0 when absent. Raises ``QuantityError`` naming the resource
    for a value that is not a whole number, or one past int32 in units or in MiB (with a hint for a value written
    in bytes)."""
    found = lookup_resource(container, name)
    if found is None:
        return 0
    section, raw = found
    where = f"{field}.{section}[{name}]"
    hint = unit_hint(raw, unit_mib)
    try:
        units = whole_quantity(where, raw, INT32_MAX, INT32_TOO_LARGE)
    except QuantityError as err:
        raise QuantityError(where, raw, err.reason + hint) from None
    if units * unit_mib > INT32_MAX:
        raise QuantityError(where, raw, f"× {unit_mib} MiB units {INT32_TOO_LARGE}{hint}")
    return units * unit_mib


def unit_hint(value: QuantityValue, unit_mib: int) -> str:
    """For a memory resource counted in ``unit_mib`` MiB units but written in bytes (``16Gi``): ``"; it counts
    256 MiB units: did you mean 64?"``; empty when the value carries no byte suffix."""
    text = str(value).strip()
    if not text or text[-1].isdigit() or isinstance(value, bool):
        return ""
    try:
        number = quantity_as_int(value, "")
    except (InvalidInput, ValueError):
        return ""
    units = number // (unit_mib * _MIB)
    return f"; it counts {unit_mib} MiB units: did you mean {units}?" if units > 0 else ""


def synthesized_index(node: str, suffix: str, uuid: str) -> int:
    """The card index of a synthesized id ``<node>-<suffix>-<i>``; raises ``InvalidInput`` for another id."""
    prefix = f"{node}-{suffix}-"
    tail = uuid.removeprefix(prefix)
    if tail == uuid or not tail.isdigit():
        raise InvalidInput("device id", uuid, f"not a {suffix} card of node {node} (expected {prefix}<index>)")
    return int(tail)


@dataclass(frozen=True, slots=True)
class CapacityLayout:
    """How one vendor's cards are rebuilt from the node's capacity."""

    core_resource: str
    """Core units over all cards (``cambricon.com/mlu.smlu.vcore``)."""
    memory_resource: str
    """Memory units over all cards (``cambricon.com/mlu.smlu.vmemory``)."""
    suffix: str
    """The id's middle part: ``<node>-<suffix>-<i>``."""
    device_type: str
    """The cards' type (the vendor key: ``MLU``, ``Mthreads``)."""
    cores_per_card: int
    """Core units of one card; also the card's ``devcore``."""
    unit_mib: int
    """MiB in one memory unit."""
    slots: int = 100
    """Tasks that may share one card (``count``)."""

    def devices(self, node: Node) -> tuple[DeviceInfo, ...] | None:
        """The node's cards; None when the node has no (or zero) core capacity for this vendor."""
        cores = capacity_whole(node, self.core_resource)
        if not cores:
            return None
        memory = capacity_whole(node, self.memory_resource) or 0
        cards = -(-cores // self.cores_per_card)
        if cards > MAX_DEVICES:
            raise InvalidInput(
                f"status.capacity[{self.core_resource}]",
                cores,
                f"{cards} cards of {self.cores_per_card} core units: hami accepts at most {MAX_DEVICES} per node",
            )
        devmem = memory * self.unit_mib * self.cores_per_card // cores
        if devmem > INT32_MAX:
            raise InvalidInput(
                f"status.capacity[{self.memory_resource}]",
                memory,
                f"gives {devmem} MiB per card ({self.unit_mib} MiB units), beyond the int32 range of an allocation",
            )
        name = node.metadata.name
        return tuple(
            DeviceInfo(
                id=f"{name}-{self.suffix}-{i}",
                index=i,
                count=self.slots,
                devmem=devmem,
                devcore=self.cores_per_card,
                type=self.device_type,
                numa=0,
                health=True,
            )
            for i in range(cards)
        )
