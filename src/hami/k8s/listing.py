"""A read-only listing of what ``hami top`` and ``hami explain`` read from a live cluster.

Three list calls — nodes, pods that have not finished, resource quotas — the same objects
``kubectl get nodes,pods,resourcequotas -A -o json`` prints for a snapshot. A caller needs only ``list`` on
those three resources (a read-only identity is enough). Quotas are optional: an identity that may not list them
gets the listing without quotas and a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hami.errors import ApiError
from hami.k8s.client import KubeClient
from hami.k8s.cluster import LIVE_PODS
from hami.k8s.resources import NODES, PODS, RESOURCE_QUOTAS
from hami.protocol.objects import Node, Pod, ResourceQuota

__all__ = ["ClusterListing", "list_cluster"]


@dataclass(slots=True)
class ClusterListing:
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    quotas: list[ResourceQuota] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def list_cluster(client: KubeClient) -> ClusterListing:
    """List nodes, live pods and quotas (each one consistent list; the three are read one after another)."""
    out = ClusterListing()
    out.nodes = (await client.list(NODES, type=Node)).items
    out.pods = (await client.list(PODS, type=Pod, field_selector=LIVE_PODS)).items
    try:
        out.quotas = (await client.list(RESOURCE_QUOTAS, type=ResourceQuota)).items
    except ApiError as err:
        if err.status != 403:
            raise
        out.notes.append("resource quotas not readable with these credentials; quota limits are not applied")
    return out
