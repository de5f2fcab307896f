"""Namespace quotas for the claims DRA mode's claim controller creates (docs/dra-mode.md, docs/trust.md). Pure.

``/webhook/dra`` checks a pod's quota at admission, on the request as it arrived. The claim controller creates the
claims later, from the pod's annotation ``hami.io/dra-requests``, which the webhook never saw when a pod got round it
(written by hand in a namespace the webhook does not translate, or edited after admission where the allocation
policy is not installed). So the controller checks the quota again, itself, before it creates a pod's claims:

* **demand** (:func:`request_demand`): what each claim's recorded request asks for, read as admission reads a
  container (the vendor's ``parse_request``: memory MiB × devices, cores × devices), summed over the pod's claims;
* **in use**: the namespace's usage in hami's ``QuotaBook`` (extender pods and *allocated* claims) plus the claims
  this controller created that are not allocated yet (:class:`PendingClaims`), so a burst of pods, each under the
  quota, cannot together get past it while kube-scheduler has allocated none of them;
* **verdict**: ``QuotaBook.problem`` — the same limits, memory factor and message as admission.

A pod over its quota gets no claim at all (its claims are created together or not at all) and waits; the controller
tries again at its next sweep, so the pod proceeds once quota frees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.devices.base import Vendor
from hami.devices.dra import DraTranslation
from hami.scheduling.dra.translate import read_entry

__all__ = ["PendingClaims", "add_amounts", "request_demand"]


def add_amounts(into: dict[str, int], amounts: Mapping[str, int]) -> dict[str, int]:
    """``into`` with ``amounts`` added, resource by resource (zeros left out)."""
    for resource, amount in amounts.items():
        if amount:
            into[resource] = into.get(resource, 0) + amount
    return into


def request_demand(request: Mapping[str, Any], vendors: Mapping[str, Vendor]) -> dict[str, int]:
    """What one recorded request (an entry of ``hami.io/dra-requests``) counts against its namespace's quotas, by
    resource name, as admission counts a container: ``memreq × nums`` and ``coresreq × nums`` of each vendor with a
    DRA translation. Raises ``InvalidInput`` naming the field for an entry that cannot be read (the controller's
    translation refuses it the same way)."""
    container, where, _ = read_entry(request)
    demand: dict[str, int] = {}
    for vendor in vendors.values():
        names = vendor.resources
        if not isinstance(vendor, DraTranslation) or not (names.memory or names.core):
            continue
        wanted = vendor.parse_request(container, where)
        if wanted is None or wanted.nums <= 0:
            continue
        for resource, amount in (
            (names.memory, wanted.memreq * wanted.nums),
            (names.core, wanted.coresreq * wanted.nums),
        ):
            if resource:
                add_amounts(demand, {resource: amount})
    return demand


@dataclass(slots=True)
class PendingClaims:
    """Claims the controller created that are not allocated yet, with what each counts against its namespace's
    quotas; dropped once the claim is allocated (``QuotaBook`` counts it then), deleted, or its pod bound or gone.
    Indexed by pod and summed by namespace as they change: the controller asks per pod it serves and per pod
    deleted, and neither scans the claims."""

    claims: dict[str, tuple[str, str, dict[str, int]]] = field(default_factory=dict)
    """``namespace/name`` → (namespace, pod UID, amounts)."""
    by_pod: dict[str, set[str]] = field(default_factory=dict)
    """Pod UID → its keys in ``claims``."""
    totals: dict[str, dict[str, int]] = field(default_factory=dict)
    """Namespace → the sum of its claims' amounts (``used``)."""

    def add(self, key: str, namespace: str, pod_uid: str, amounts: Mapping[str, int]) -> None:
        self.drop([key])
        self.claims[key] = (namespace, pod_uid, dict(amounts))
        self.by_pod.setdefault(pod_uid, set()).add(key)
        add_amounts(self.totals.setdefault(namespace, {}), amounts)
        if not self.totals[namespace]:
            del self.totals[namespace]

    def drop(self, keys: Iterable[str]) -> None:
        for key in keys:
            gone = self.claims.pop(key, None)
            if gone is None:
                continue
            namespace, uid, amounts = gone
            mine = self.by_pod.get(uid)
            if mine is not None:
                mine.discard(key)
                if not mine:
                    del self.by_pod[uid]
            total = self.totals.get(namespace, {})
            for resource, amount in amounts.items():
                left = total.get(resource, 0) - amount
                if left:
                    total[resource] = left
                else:
                    total.pop(resource, None)
            if not total:
                self.totals.pop(namespace, None)

    def drop_pod(self, pod_uid: str) -> None:
        self.drop(list(self.by_pod.get(pod_uid, ())))

    def used(self, namespace: str) -> dict[str, int]:
        """What the namespace's pending claims count, by resource name."""
        return dict(self.totals.get(namespace, {}))
