"""A container's NVIDIA resources → its :class:`~hami.devices.base.ContainerRequest` (scheduler-core.md §3.2).

The resource names come from the ``nvidia:`` config section (defaults ``nvidia.com/gpu``,
``nvidia.com/gpumem``, ``nvidia.com/gpumem-percentage``, ``nvidia.com/gpucores``, ``nvidia.com/priority``).
For each one the value in ``resources.limits`` wins; ``resources.requests`` is read only when limits lack
the key (a fallback, not a minimum). HAMi's rules, kept exactly:

1. No count, or a count of 0 → no request (``None``); the other resources are then not read.
2. ``gpumem`` is a plain number of MiB, multiplied by ``memoryFactor``. It is read as the integer the
   quantity denotes, so suffixes scale it like any quantity: ``gpumem: 3000`` is 3000 MiB, ``gpumem: 1k``
   is 1000 MiB, and ``gpumem: 3Gi`` is 3221225472 "MiB" — not 3 GiB. That is HAMi's meaning too.
3. ``gpumem-percentage``: absent → 101 ("unset"); above 100 → 100; 0 or below → stays unset.
4. Neither memory nor percentage: ``defaultMemory`` MiB if configured (not multiplied by the factor),
   else 100 percent (the whole card).
5. ``gpucores`` (percent of one GPU) defaults to ``defaultCores``.

Where HAMi silently drops or mangles a value, hami refuses the pod with a
:class:`~hami.errors.QuantityError` naming the container, the resource and the value (spec §11 items 3, 12):

* a count, memory, cores or priority that is not a quantity, not a whole number (``1.5``, ``500m``) or
  negative — HAMi ignores a malformed count or cores value, and keeps negative ones;
* a count or priority above int32, or memory above int32 after ``memoryFactor`` (``gpumem: 16Gi``) — HAMi
  discards the whole request and schedules the pod *without a GPU*;
* ``gpucores`` above 100 — HAMi clamps it to 100 later, in Fit;
* a ``gpumem-percentage`` that is not a whole number — HAMi ignores it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest
from hami.devices.nvidia.config import NvidiaConfig
from hami.devices.resources import lookup_resource, mib_hint, whole_quantity
from hami.errors import QuantityError
from hami.protocol.keys import NVIDIA_KEYS
from hami.protocol.objects import Container, Pod, QuantityValue
from hami.protocol.quantity import INT32_MAX, parse_quantity, quantity_as_int

__all__ = ["parse_nvidia_request", "parse_pod_nvidia_requests"]

_VENDOR: Final = NVIDIA_KEYS.vendor
_INT32_REASON: Final = "exceeds the int32 range HAMi's annotations can carry"


def parse_nvidia_request(container: Container, cfg: NvidiaConfig, field: str) -> ContainerRequest | None:
    """The container's NVIDIA request, or ``None`` when it asks for no NVIDIA GPU.

    ``field`` names the container in errors (``containers[1](train)``); each error appends the resource:
    ``containers[1](train).limits[nvidia.com/gpumem]: 17179869184 MiB exceeds the int32 range HAMi's
    annotations can carry (got '16Gi')``.
    """

    count_found = lookup_resource(container, cfg.resource_count_name)
    if count_found is None:
        return None
    count = whole_quantity(
        _where(field, count_found, cfg.resource_count_name), count_found[1], INT32_MAX, _INT32_REASON
    )
    if count == 0:
        return None
    memory = _memory(container, cfg, field)
    percentage = _percentage(container, cfg, field)
    if percentage == MEM_PERCENTAGE_UNSET and memory == 0:
        if cfg.default_memory != 0:
            memory = cfg.default_memory
        else:
            percentage = 100
    cores = _optional_whole(container, cfg.resource_core_name, field, 100, "must be at most 100 (percent of one GPU)")
    priority = _optional_whole(container, cfg.resource_priority_name, field, INT32_MAX, _INT32_REASON)
    return ContainerRequest(
        vendor=_VENDOR,
        nums=count,
        memreq=memory,
        mem_percentage=percentage,
        coresreq=cfg.default_cores if cores is None else cores,
        priority=priority,
    )


def _where(field: str, found: tuple[str, QuantityValue], name: str) -> str:
    return f"{field}.{found[0]}[{name}]"


def _memory(container: Container, cfg: NvidiaConfig, field: str) -> int:
    """The memory request in MiB (times ``memoryFactor``), 0 when not asked."""
    found = lookup_resource(container, cfg.resource_memory_name)
    if found is None:
        return 0
    where = _where(field, found, cfg.resource_memory_name)
    written = quantity_as_int(found[1], where)
    if written < 0:
        raise QuantityError(where, found[1], "must not be negative")
    memory = written * cfg.memory_factor
    if memory > INT32_MAX:
        scaled = f" ({written} × memoryFactor {cfg.memory_factor})" if cfg.memory_factor > 1 else ""
        raise QuantityError(where, found[1], f"{memory} MiB{scaled} {_INT32_REASON}{mib_hint(found[1])}")
    return memory


def _percentage(container: Container, cfg: NvidiaConfig, field: str) -> int:
    """The memory percentage request, ``MEM_PERCENTAGE_UNSET`` when not asked."""
    found = lookup_resource(container, cfg.resource_memory_percentage_name)
    if found is None:
        return MEM_PERCENTAGE_UNSET
    where = _where(field, found, cfg.resource_memory_percentage_name)
    exact: Fraction = parse_quantity(found[1], where)
    if exact.denominator != 1:
        raise QuantityError(where, found[1], "must be a whole number")
    # HAMi: above 100 → 100 (also far beyond int32); 0 or below → ignored, i.e. still "unset".
    return min(exact.numerator, 100) if exact > 0 else MEM_PERCENTAGE_UNSET


def _optional_whole(container: Container, name: str, field: str, limit: int, reason: str) -> int | None:
    found = lookup_resource(container, name)
    if found is None:
        return None
    return whole_quantity(_where(field, found, name), found[1], limit, reason)


def parse_pod_nvidia_requests(pod: Pod, cfg: NvidiaConfig) -> tuple[ContainerRequest | None, ...]:
    """One entry per container, init containers first (HAMi's order, §3.1); ``None`` where no GPU is asked.

    Containers are named ``initContainers[i](name)`` / ``containers[j](name)`` in errors.
    """
    init = (
        parse_nvidia_request(container, cfg, f"initContainers[{index}]({container.name})")
        for index, container in enumerate(pod.spec.init_containers)
    )
    app = (
        parse_nvidia_request(container, cfg, f"containers[{index}]({container.name})")
        for index, container in enumerate(pod.spec.containers)
    )
    return (*init, *app)
