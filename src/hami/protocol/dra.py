"""Compact views of Dynamic Resource Allocation objects (``resource.k8s.io/v1``): only the fields hami reads.

hami reads DRA objects and never writes them (issue 18: a DRA-aware ledger, read-only towards DRA). These msgspec
Structs decode the API server's JSON (``msgspec.json.decode(raw, type=ResourceSlice)``) or YAML-loaded dicts
(``msgspec.convert``); unknown fields are ignored, so a newer API server's additions never break decoding.

Field names follow the v1 API of Kubernetes 1.34+ (``k8s.io/api/resource/v1``), where a device's attributes and
capacity sit directly on the device (v1beta1 nested them under ``basic``):

* ``ResourceSlice.spec``: ``driver``, ``pool.{name, generation}``, ``nodeName``, ``devices[].{name, attributes,
  capacity (value, requestPolicy.default), allowMultipleAllocations, nodeName, taints[].{key, value, effect}}``;
* ``ResourceClaim``: ``metadata.uid``, ``metadata.ownerReferences[].{apiVersion, kind, name, uid, controller}``,
  ``status.allocation.devices.results[].{request, driver, pool, device, shareID, consumedCapacity, adminAccess}``,
  ``status.allocation.nodeSelector``, ``status.reservedFor[].{resource, name, uid}``;
* ``DeviceClass.spec.extendedResourceName``.

Quantities stay as written (``"80Gi"``, or a number from a YAML file); ``hami.protocol.quantity`` parses them.
Attribute and capacity names may be qualified by a domain (``gpu.nvidia.com/uuid``); :func:`local_name` strips the
driver's own domain, which is what an unqualified name means.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from hami.protocol.objects import ObjectMeta, QuantityValue

__all__ = [
    "HAMI_CORE_CONFIG_API_VERSION",
    "HAMI_CORE_CONFIG_KIND",
    "AllocationResult",
    "CapacityRequestPolicy",
    "ClaimMeta",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceClassSpec",
    "DeviceRequestAllocationResult",
    "DeviceTaint",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "OpaqueDeviceConfiguration",
    "OwnerReference",
    "ResourceClaim",
    "ResourceClaimConsumerReference",
    "ResourceClaimStatus",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
    "hami_core_config",
    "local_name",
]

HAMI_CORE_CONFIG_API_VERSION: Final = "hami.io/v1alpha1"
HAMI_CORE_CONFIG_KIND: Final = "HAMiCoreConfig"

SmLimit = Literal["booked", "none"]
"""``smLimit`` of a ``HAMiCoreConfig``: ``booked`` (the default) limits each card's compute to the cores the claim
booked (at least 1 %); ``none`` sets no limit, as HAMi does for a task that asked for no cores."""


def hami_core_config(sm_limit: SmLimit) -> dict[str, Any]:
    """The ``parameters`` of an opaque device configuration for hami's driver (a claim's ``spec.devices.config``,
    copied by kube-scheduler into ``status.allocation.devices.config``)."""
    return {"apiVersion": HAMI_CORE_CONFIG_API_VERSION, "kind": HAMI_CORE_CONFIG_KIND, "smLimit": sm_limit}


def local_name(name: str, driver: str) -> str:
    """An attribute or capacity name without the driver's own domain (``gpu.nvidia.com/uuid`` → ``uuid``).

    In the API an unqualified name belongs to the driver's domain, so both spellings mean the same thing; a name
    qualified by another domain is left as it is (it is not the driver's)."""
    prefix = f"{driver}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


class DeviceAttribute(msgspec.Struct, omit_defaults=True):
    """One typed attribute value; exactly one field is set in a valid object."""

    int_: int | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None

    def text(self) -> str | None:
        """The value as text (a UUID is a ``string``), None when the attribute holds none."""
        for value in (self.string, self.version):
            if value is not None:
                return value
        if self.int_ is not None:
            return str(self.int_)
        if self.bool_ is not None:
            return "true" if self.bool_ else "false"
        return None


class CapacityRequestPolicy(msgspec.Struct, omit_defaults=True):
    """How a shared device's capacity is consumed; ``default`` is what a claim that asks nothing consumes."""

    default: QuantityValue | None = None


class DeviceCapacity(msgspec.Struct, rename="camel", omit_defaults=True):
    """One capacity of a device: its total ``value`` and, on a shared device, its request policy."""

    value: QuantityValue | None = None
    request_policy: CapacityRequestPolicy | None = None


class DeviceTaint(msgspec.Struct, omit_defaults=True):
    """A device taint (``DRADeviceTaints``, GA in 1.37): ``effect`` is ``NoSchedule``, ``NoExecute`` or ``None``."""

    key: str = ""
    value: str = ""
    effect: str = ""

    def text(self) -> str:
        """``key=value:effect`` (``key:effect`` without a value), as kubectl writes node taints."""
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


class Device(msgspec.Struct, rename="camel", omit_defaults=True):
    """One device of a slice (``nodeName`` only with ``spec.perDeviceNodeSelection``)."""

    name: str = ""
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    allow_multiple_allocations: bool | None = None
    node_name: str = ""
    taints: list[DeviceTaint] = []


class ResourcePool(msgspec.Struct, rename="camel", omit_defaults=True):
    """The pool a slice belongs to; only slices of the pool's highest ``generation`` count."""

    name: str = ""
    generation: int = 0
    resource_slice_count: int = 0


class ResourceSliceSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str = ""
    all_nodes: bool | None = None
    devices: list[Device] = []


class ResourceSlice(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)
    kind: str = "ResourceSlice"


class DeviceRequestAllocationResult(msgspec.Struct, rename="camel", omit_defaults=True):
    """One allocated device of a claim. ``share_id`` is set when the device is shared (allowMultipleAllocations);
    ``consumed_capacity`` then holds what this allocation consumes of each of the device's capacities."""

    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    share_id: str | None = msgspec.field(default=None, name="shareID")
    consumed_capacity: dict[str, QuantityValue] = {}
    admin_access: bool | None = None


class OpaqueDeviceConfiguration(msgspec.Struct, omit_defaults=True):
    """Configuration for one driver; ``parameters`` is the driver's own object, left undecoded here."""

    driver: str = ""
    parameters: Any = None


class DeviceAllocationConfiguration(msgspec.Struct, omit_defaults=True):
    """One configuration of an allocation (``source`` ``FromClass`` or ``FromClaim``), for the results of the
    listed ``requests`` (a subrequest ``gpu/a`` is covered by ``gpu``; no requests: every result)."""

    source: str = ""
    requests: list[str] = []
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(msgspec.Struct, omit_defaults=True):
    results: list[DeviceRequestAllocationResult] = []
    config: list[DeviceAllocationConfiguration] = []


class NodeSelectorRequirement(msgspec.Struct, omit_defaults=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(msgspec.Struct, rename="camel", omit_defaults=True):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(msgspec.Struct, rename="camel", omit_defaults=True):
    node_selector_terms: list[NodeSelectorTerm] = []

    def node_name(self) -> str:
        """The one node this selector names by ``metadata.name`` (what kube-scheduler writes), "" otherwise."""
        names = {
            value
            for term in self.node_selector_terms
            for req in term.match_fields
            if req.key == "metadata.name" and req.operator == "In"
            for value in req.values
        }
        return next(iter(names)) if len(names) == 1 else ""


class AllocationResult(msgspec.Struct, rename="camel", omit_defaults=True):
    devices: DeviceAllocationResult = msgspec.field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = None


class ResourceClaimConsumerReference(msgspec.Struct, rename="camel", omit_defaults=True):
    """Who a claim is reserved for: a pod (``resource: pods``, empty ``apiGroup``) in the claim's namespace."""

    api_group: str = ""
    resource: str = ""
    name: str = ""
    uid: str = ""


class ResourceClaimStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = []


class OwnerReference(msgspec.Struct, rename="camel", omit_defaults=True):
    """``metadata.ownerReferences[]`` as far as hami reads it (DRA mode: whose claim it is)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ClaimMeta(ObjectMeta, rename="camel", omit_defaults=True):
    """A claim's metadata: with its owners (DRA mode's claim controller creates claims owned by their pod)."""

    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)


class ResourceClaim(msgspec.Struct, omit_defaults=True):
    metadata: ClaimMeta = msgspec.field(default_factory=ClaimMeta)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)
    kind: str = "ResourceClaim"

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class DeviceClassSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    extended_resource_name: str = ""


class DeviceClass(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)
    kind: str = "DeviceClass"
