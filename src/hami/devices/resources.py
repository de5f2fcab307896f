"""Reading a container's device resources: shared by every vendor's request parsing.

HAMi takes each resource from ``limits`` if it is there and from ``requests`` otherwise (limits win; requests
are a fallback, not a minimum — scheduler-core.md §3.2), and the annotations carry int32 numbers.
"""

from __future__ import annotations

from hami.errors import QuantityError
from hami.protocol.objects import Container, QuantityValue
from hami.protocol.quantity import INT32_MAX, quantity_as_int

__all__ = ["INT32_TOO_LARGE", "lookup_resource", "mib_hint", "read_int32", "whole_quantity"]

_MIB = 1 << 20


def lookup_resource(container: Container, name: str) -> tuple[str, QuantityValue] | None:
    """``(section, value)`` of resource ``name`` — ``"limits"`` first, ``"requests"`` as the fallback — or None.

    An empty resource name (a vendor config that leaves it unset) is never found.
    """
    if not name:
        return None
    resources = container.resources
    if name in resources.limits:
        return "limits", resources.limits[name]
    if name in resources.requests:
        return "requests", resources.requests[name]
    return None


def whole_quantity(field: str, value: QuantityValue, maximum: int, too_large: str) -> int:
    """A non-negative whole quantity no larger than ``maximum``; otherwise ``QuantityError`` naming ``field``."""
    number = quantity_as_int(value, field)
    if number < 0:
        raise QuantityError(field, value, "must not be negative")
    if number > maximum:
        raise QuantityError(field, value, too_large)
    return number


def mib_hint(value: QuantityValue) -> str:
    """For a memory resource counted in MiB but written in bytes (``16Gi``, ``500M``): ``"; it counts MiB: did
    you mean 16384?"``; empty when the value carries no byte suffix."""
    text = str(value).strip()
    if not text or text[-1].isdigit() or isinstance(value, bool):
        return ""
    try:
        number = quantity_as_int(value, "")
    except (QuantityError, ValueError):
        return ""
    mib = number // _MIB
    return f"; it counts MiB: did you mean {mib}?" if mib > 0 else ""


INT32_TOO_LARGE = "exceeds the int32 range HAMi's annotations can carry"


def read_int32(container: Container, name: str, field: str) -> tuple[int, QuantityValue, str] | None:
    """``(value, raw, where)`` of resource ``name`` (limits first, then requests) as a whole number within int32,
    or None when absent; ``where`` names it in errors (``containers[0](c).limits[name]``)."""
    found = lookup_resource(container, name)
    if found is None:
        return None
    section, raw = found
    where = f"{field}.{section}[{name}]"
    return whole_quantity(where, raw, INT32_MAX, INT32_TOO_LARGE), raw, where
