"""Namespace quotas on device memory and cores (scheduler-core.md §6.10).

Limits come from ResourceQuota objects: ``spec.hard`` keys ``limits.<memory resource>`` and
``limits.<core resource>`` of a registered vendor (integers). Usage is hami's own ledger: the sum of the
effective charges of the namespace's pods. An explicit 0 blocks everything; several ResourceQuota objects in
one namespace each apply (the smallest limit wins; HAMi keeps only the last one it saw).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.errors import InvalidInput
from hami.protocol.objects import ResourceQuota
from hami.protocol.quantity import quantity_as_int

__all__ = ["QuotaBook"]


class QuotaBook:
    """Limits per namespace (per ResourceQuota object) and usage per namespace, by resource name."""

    __slots__ = ("_limits", "_tracked", "generation", "used")

    def __init__(self, tracked: Iterable[str] = ()) -> None:
        self._tracked = frozenset(tracked)
        self._limits: dict[str, dict[str, dict[str, int]]] = {}  # ns -> quota name -> resource -> limit
        self.used: dict[str, dict[str, int]] = {}
        self.generation = 0
        """Bumped on every change of limits or usage (verdicts that depended on a quota are then stale)."""

    def copy(self) -> QuotaBook:
        """A copy whose usage can change without touching this one (the limits are shared, read-only)."""
        book = QuotaBook()
        book._tracked, book._limits, book.generation = self._tracked, self._limits, self.generation
        book.used = {ns: dict(per) for ns, per in self.used.items()}
        return book

    def upsert(self, quota: ResourceQuota) -> list[InvalidInput]:
        """Record a ResourceQuota's device limits; returns the entries it had to skip (not integers)."""
        ns, name = quota.metadata.namespace, quota.metadata.name
        limits: dict[str, int] = {}
        problems: list[InvalidInput] = []
        for key, value in quota.spec.hard.items():
            if not key.startswith("limits."):
                continue
            resource = key.removeprefix("limits.")
            if resource not in self._tracked:
                continue
            try:
                limits[resource] = quantity_as_int(value, f"resourcequota {ns}/{name} spec.hard[{key}]")
            except InvalidInput as err:
                problems.append(err)
        self.generation += 1
        per_ns = self._limits.setdefault(ns, {})
        if limits:
            per_ns[name] = limits
        else:
            per_ns.pop(name, None)
        return problems

    def remove(self, namespace: str, name: str) -> None:
        self.generation += 1
        self._limits.get(namespace, {}).pop(name, None)

    def limit(self, namespace: str, resource: str) -> int | None:
        found: int | None = None
        for limits in self._limits.get(namespace, {}).values():
            value = limits.get(resource)
            if value is not None and (found is None or value < found):
                found = value
        return found

    def has_limits(self, namespace: str) -> bool:
        return any(self._limits.get(namespace, {}).values())

    def add_usage(self, namespace: str, amounts: Mapping[str, int], sign: int = 1) -> None:
        self.generation += 1
        per_ns = self.used.setdefault(namespace, {})
        for resource, amount in amounts.items():
            per_ns[resource] = per_ns.get(resource, 0) + sign * amount
            if per_ns[resource] == 0:
                del per_ns[resource]
        if not per_ns:
            del self.used[namespace]

    def fits(self, namespace: str, amounts: Mapping[str, int], factors: Mapping[str, int]) -> bool:
        """Whether adding ``amounts`` keeps every limited resource of the namespace within its limit.

        ``factors`` multiplies a memory limit by the vendor's memory factor when it is above 1 (HAMi).
        """
        return self.problem(namespace, amounts, factors) is None

    def problem(
        self,
        namespace: str,
        amounts: Mapping[str, int],
        factors: Mapping[str, int],
        also_used: Mapping[str, int] | None = None,
        asker: str = "the pod asks",
    ) -> str | None:
        """None when adding ``amounts`` keeps the namespace within every limit (``fits``), counting ``also_used``
        as in use besides the book's usage; else which limit it breaks, with the numbers."""
        extra = also_used or {}
        if namespace not in self._limits:
            return None
        used = self.used.get(namespace, {})
        for resource, amount in amounts.items():
            limit = self.limit(namespace, resource)
            if limit is None:
                continue
            factor = factors.get(resource, 1)
            limit *= factor if factor > 1 else 1
            in_use = used.get(resource, 0) + extra.get(resource, 0)
            if in_use + amount > limit:
                return (
                    f"namespace {namespace} has {in_use} of {resource} in use, "
                    f"{asker} for {amount} more, the limit is {limit}"
                )
        return None
