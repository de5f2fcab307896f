"""What a pod's resources likely get wrong, in words: "did you mean", and a zero count beside memory. Pure.

A resource under a domain hami manages (``nvidia.com/``) that no vendor owns is most likely a misspelling, which
would otherwise be ignored silently (the pod would get no device, or a whole one from another scheduler). The
suggestion is a name that is **close** (difflib ratio at least ``CLOSE``, or equal but for case), of the **same
vendor** (the same domain) and of the **same role** (count, memory or cores: ``nvidia.com/gpu`` never suggests
``nvidia.com/gpumem``). A name that is another one with a model number cut short (``huawei.com/Ascend910`` beside
``huawei.com/Ascend910C``), or with another model number (``Ascend910`` beside ``Ascend310P``), names another chip,
not a typo: no suggestion then, but the vendor's names of that role.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Final, Literal

from hami.devices.base import Vendor

__all__ = ["CLOSE", "Role", "resource_hint", "resource_roles", "role_of", "zero_count_problems"]

Role = Literal["count", "memory", "cores", "priority"]
CLOSE: Final = 0.8
_LISTED: Final = 6


def role_of(name: str) -> Role:
    """The role a resource name reads as: memory (``…mem…``), cores (``…core…``, ``…vcore…``), a task priority
    (``nvidia.com/priority``: a setting, not a number of devices) or a count."""
    tail = name.rpartition("/")[2].casefold()
    if "priority" in tail or tail.startswith("prio"):
        return "priority"
    if "mem" in tail:
        return "memory"
    if "core" in tail and not tail.endswith(("neuroncore",)):
        return "cores"
    return "count"


def resource_roles(vendors: Iterable[Vendor], extra: Iterable[str] = ()) -> dict[str, Role]:
    """Every resource name the vendors own and its role; ``extra`` names (from the device config) by ``role_of``."""
    roles: dict[str, Role] = {name: role_of(name) for name in extra}
    for v in vendors:
        r = v.resources
        roles[r.count] = "count"
        if r.memory:
            roles[r.memory] = "memory"
        if r.core:
            roles[r.core] = "cores"
    return roles


def _cut_model(a: str, b: str) -> bool:
    """Whether one name is the other with its model cut short after a digit (``Ascend910`` / ``Ascend910C``)."""
    short, long = sorted((a, b), key=len)
    return short != long and long.startswith(short) and short[-1:].isdigit()


def _close(name: str, known: str) -> float:
    """How alike two names of one domain are, by what follows the domain (the domain would make any two alike)."""
    a, b = name.rpartition("/")[2], known.rpartition("/")[2]
    if a.casefold() == b.casefold():
        return 1.0
    if _cut_model(a, b) or re.findall(r"\d+", a) != re.findall(r"\d+", b):
        return 0.0  # another model number is another chip, not a typo
    return difflib.SequenceMatcher(None, a, b).ratio()


def resource_hint(name: str, roles: Mapping[str, Role]) -> str:
    """``"; did you mean X?"`` (or ``X or Y`` on a tie), else ``"; hami's <role> resources under <domain>: …"``,
    else ``""``."""
    domain, _, _ = name.partition("/")
    role = role_of(name)
    same = sorted(k for k, r in roles.items() if r == role and k.partition("/")[0] == domain and k != name)
    scored = [(_close(name, k), k) for k in same]
    best = max((score for score, _ in scored), default=0.0)
    if best >= CLOSE:
        picks = [k for score, k in scored if score == best]
        return f"; did you mean {' or '.join(picks)}?"
    if not same:
        return ""
    shown = ", ".join(same[:_LISTED]) + (f" and {len(same) - _LISTED} more" if len(same) > _LISTED else "")
    return f"; hami's {role} resources under {domain}/ are {shown}"


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None  # a quantity with a suffix: the parser judges it; "0" is what matters here
    return None


def zero_count_problems(values: Mapping[str, object], vendors: Iterable[Vendor]) -> list[str]:
    """For each vendor whose count resource is set to 0 while its memory or cores are asked for: a sentence.
    A count of 0 means no device, so the memory and cores are ignored (HAMi does the same)."""
    out = []
    for v in vendors:
        r = v.resources
        if _number(values.get(r.count)) != 0:
            continue
        asked = [f"{n}: {values[n]}" for n in (r.memory, r.core) if n and n in values and _number(values[n]) != 0]
        if asked:
            out.append(
                f"{r.count}: 0 asks for no device, so {', '.join(asked)} is ignored; "
                f"remove {r.count} (the admission webhook adds its default count) or set it to the number of devices"
            )
    return out
