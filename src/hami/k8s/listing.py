"""A read-only listing of what ``hami top`` and ``hami explain`` read from a live cluster.

Three list calls — nodes, pods that have not finished, resource quotas — the same objects
``kubectl get nodes,pods,resourcequotas -A -o json`` prints for a snapshot. A caller needs only ``list`` on
those three resources (a read-only identity is enough). Quotas are optional: an identity that may not list them
gets the listing without quotas and a note saying so.

Then the DRA objects (docs/dra.md): DeviceClasses, ResourceSlices and ResourceClaims of ``resource.k8s.io/v1``,
so the view counts what claims hold beside device-plugin pods. Optional too: a cluster that does not serve the API
(404) has none, and an identity that may not list them gets the listing without them and a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hami.errors import ApiError
from hami.k8s.client import KubeClient
from hami.k8s.cluster import LIVE_PODS
from hami.k8s.resources import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_QUOTAS, RESOURCE_SLICES
from hami.protocol.dra import DeviceClass, ResourceClaim, ResourceSlice
from hami.protocol.objects import Node, Pod, ResourceQuota

__all__ = ["ClusterListing", "list_cluster"]


@dataclass(slots=True)
class ClusterListing:
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    quotas: list[ResourceQuota] = field(default_factory=list)
    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    claims: list[ResourceClaim] = field(default_factory=list)
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
    await _list_dra(client, out)
    return out


async def _list_dra(client: KubeClient, out: ClusterListing) -> None:
    """DeviceClasses, ResourceSlices and ResourceClaims; all three or none (a 404 or 403 leaves them out)."""
    try:
        classes = (await client.list(DEVICE_CLASSES, type=DeviceClass)).items
        slices = (await client.list(RESOURCE_SLICES, type=ResourceSlice)).items
        claims = (await client.list(RESOURCE_CLAIMS, type=ResourceClaim)).items
    except ApiError as err:
        if err.status == 404:  # no resource.k8s.io/v1 here: no claims to show
            return
        if err.status != 403:
            raise
        out.notes.append(
            "DRA objects (resource.k8s.io deviceclasses, resourceslices, resourceclaims) not readable with these "
            "credentials; what DRA claims hold is not shown"
        )
        return
    out.classes, out.slices, out.claims = classes, slices, claims
