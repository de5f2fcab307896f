"""The Kubernetes resources hami talks to, and how their REST paths are built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

__all__ = [
    "DEVICE_CLASSES",
    "EVENTS",
    "LEASES",
    "NODES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "RESOURCE_CLAIMS",
    "RESOURCE_QUOTAS",
    "RESOURCE_SLICES",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "Resource",
]


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: ``group`` is ``""`` for the core API (``/api/v1``)."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path. A namespaced resource without ``namespace`` addresses all namespaces (list/watch only)."""
        root = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{quote(namespace, safe='')}"
        path = f"{root}/{self.plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
            if subresource is not None:
                path += f"/{subresource}"
        return path

    def __str__(self) -> str:
        return self.plural if not self.group else f"{self.plural}.{self.group}"


PODS: Final = Resource("", "v1", "pods", namespaced=True)
POD_DISRUPTION_BUDGETS: Final = Resource("policy", "v1", "poddisruptionbudgets", namespaced=True)
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
RESOURCE_QUOTAS: Final = Resource("", "v1", "resourcequotas", namespaced=True)
EVENTS: Final = Resource("", "v1", "events", namespaced=True)
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", namespaced=True)
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS: Final = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False)
RESOURCE_SLICES: Final = Resource("resource.k8s.io", "v1", "resourceslices", namespaced=False)
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims", namespaced=True)
DEVICE_CLASSES: Final = Resource("resource.k8s.io", "v1", "deviceclasses", namespaced=False)
