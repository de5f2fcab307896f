"""Compact views of Kubernetes objects: only the fields hami reads (decode at the edge).

These msgspec Structs decode straight from the API server's JSON (``msgspec.json.decode(raw, type=Pod)``) or
from YAML-loaded dicts (``msgspec.convert(obj, type=Pod)``); unknown fields are ignored, so a 6 KB pod becomes
a few hundred bytes of state. Quantities stay as the text the user wrote (``"3Gi"``); YAML files may also
hold plain numbers, so ``int``/``float`` are accepted and parsed by ``hami.protocol.quantity``.

The views are ``gc=False``: decoded JSON is a tree (no view can refer back to another), so the cyclic garbage
collector need not track them. The scheduler's watch caches hold every pod; untracked, they cost 16 bytes less each
and the collector's passes do not walk them (issue 19, cold start at 100,000 pods).
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = [
    "Container",
    "ContainerClaim",
    "ContainerStatus",
    "EnvVar",
    "LabelRequirement",
    "LabelSelector",
    "Node",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "Pod",
    "PodCondition",
    "PodDisruptionBudget",
    "PodDisruptionBudgetSpec",
    "PodDisruptionBudgetStatus",
    "PodResourceClaim",
    "PodResourceClaimStatus",
    "PodSpec",
    "PodStatus",
    "QuantityValue",
    "ResourceQuota",
    "ResourceQuotaSpec",
    "ResourceRequirements",
    "SchedulingGroup",
    "SecurityContext",
    "WatchedContainer",
    "WatchedPod",
    "WatchedPodSpec",
    "WatchedPodStatus",
]

QuantityValue = str | int | float


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None


class ContainerClaim(msgspec.Struct, omit_defaults=True, gc=False):
    """``resources.claims[]``: one of the pod's ``spec.resourceClaims`` (by its ``name``) this container uses."""

    name: str = ""
    request: str = ""


class ResourceRequirements(msgspec.Struct, omit_defaults=True, gc=False):
    limits: dict[str, QuantityValue] = {}
    requests: dict[str, QuantityValue] = {}
    claims: list[ContainerClaim] = []


class PodResourceClaim(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """``spec.resourceClaims[]``: a claim by its own name, or one made from a template (its name then in
    ``status.resourceClaimStatuses``)."""

    name: str = ""
    resource_claim_name: str = ""
    resource_claim_template_name: str = ""


class PodResourceClaimStatus(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """``status.resourceClaimStatuses[]``: the ResourceClaim generated for a template entry of that ``name``."""

    name: str = ""
    resource_claim_name: str = ""


class SecurityContext(msgspec.Struct, omit_defaults=True, gc=False):
    privileged: bool | None = None


class EnvVar(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """A literal container environment variable (``valueFrom`` references are not resolved)."""

    name: str = ""
    value: str = ""


class Container(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    name: str = ""
    env: list[EnvVar] = []  # the device plugin reads CUDA_DISABLE_CONTROL from it
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    security_context: SecurityContext | None = None
    restart_policy: str | None = None  # "Always" on an init container = a sidecar (runs beside the app)


class SchedulingGroup(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """``spec.schedulingGroup`` (gang scheduling, Kubernetes 1.35+): the PodGroup a pod belongs to."""

    pod_group_name: str = ""


class PodSpec(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    containers: list[Container] = []
    init_containers: list[Container] = []
    node_name: str = ""
    scheduler_name: str = ""
    node_selector: dict[str, str] = {}
    priority: int | None = None
    preemption_policy: str | None = None  # "Never" or "PreemptLowerPriority" (admission sets it from the class)
    termination_grace_period_seconds: int | None = None  # how long a preemption waits for its victims
    scheduling_group: SchedulingGroup | None = None
    resource_claims: list[PodResourceClaim] = []


class ContainerStatus(msgspec.Struct, omit_defaults=True, gc=False):
    name: str = ""
    state: dict[str, dict[str, object]] = {}  # {"terminated": {"exitCode": 0, ...}} etc.


class PodCondition(msgspec.Struct, omit_defaults=True, gc=False):
    """One ``status.conditions`` entry; preemption reads ``DisruptionTarget`` (``hami.protocol.disruption``)."""

    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class PodStatus(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    phase: str = ""
    start_time: str | None = None  # RFC 3339, set by the kubelet when it accepts the pod
    nominated_node_name: str = ""  # where a preemption made room for the pod (hami's holds are rebuilt from it)
    init_container_statuses: list[ContainerStatus] = []
    conditions: tuple[PodCondition, ...] = ()
    resource_claim_statuses: list[PodResourceClaimStatus] = []


class Pod(msgspec.Struct, omit_defaults=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)
    kind: str = "Pod"

    @property
    def key(self) -> str:
        """``namespace/name``, as kubectl prints it."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


class WatchedContainer(Container, rename={"env": "(env: not decoded)"}, gc=False):
    """A container as the scheduler's pod watch decodes it: ``env`` is left empty (its wire name is one no JSON
    object has, so the decoder skips the real ``env``). The scheduler never reads a container's environment (the
    device plugin and the webhook do, from their own ``Pod``); at 100,000 pods with twenty variables each it was a
    third of the list's decode time and 370 MB of the watch cache (issue 19, cold start)."""

    env: list[EnvVar] = []


class WatchedPodSpec(PodSpec, gc=False):
    containers: list[WatchedContainer] = []  # type: ignore[assignment]  # a Container, read-only here
    init_containers: list[WatchedContainer] = []  # type: ignore[assignment]


_NO_RAW: Final = msgspec.Raw()
_conditions = msgspec.json.Decoder(tuple[PodCondition, ...])


class WatchedPodStatus(
    PodStatus, rename={"conditions": "(conditions: read from raw)", "raw_conditions": "conditions"}, gc=False
):
    """A pod's status as the pod watch decodes it: ``conditions`` are only skipped over (kept as a ``Raw`` view of
    the message until ``WatchedPod.__post_init__``), since a pod has five or so and preemption reads only the
    ``DisruptionTarget`` of a terminating pod: decoded for every pod they cost about 900 bytes and as long a
    decode as the rest of the pod together (issue 19's cold start at 100,000 pods)."""

    conditions: tuple[PodCondition, ...] = ()
    raw_conditions: msgspec.Raw = _NO_RAW


class WatchedPod(Pod, gc=False):
    """A ``Pod`` as the scheduler's pod watch keeps it: everything a ``Pod`` decodes but the containers' ``env``,
    and of the conditions only the ``DisruptionTarget`` ones of a terminating pod."""

    spec: WatchedPodSpec = msgspec.field(default_factory=WatchedPodSpec)
    status: WatchedPodStatus = msgspec.field(default_factory=WatchedPodStatus)

    def __post_init__(self) -> None:
        status = self.status
        if not status.raw_conditions:
            return
        if self.metadata.deletion_timestamp is not None:
            try:
                found = _conditions.decode(status.raw_conditions)
            except msgspec.MsgspecError:
                found = ()  # unreadable (never from an API server): no condition is believed
            status.conditions = tuple(c for c in found if c.type == "DisruptionTarget")
        status.raw_conditions = _NO_RAW  # the Raw views the whole message: not kept


class NodeSpec(msgspec.Struct, omit_defaults=True, gc=False):
    unschedulable: bool = False


class NodeStatus(msgspec.Struct, omit_defaults=True, gc=False):
    capacity: dict[str, QuantityValue] = {}
    allocatable: dict[str, QuantityValue] = {}


class Node(msgspec.Struct, omit_defaults=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)
    kind: str = "Node"


class ResourceQuotaSpec(msgspec.Struct, omit_defaults=True, gc=False):
    hard: dict[str, QuantityValue] = {}


class ResourceQuota(msgspec.Struct, omit_defaults=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceQuotaSpec = msgspec.field(default_factory=ResourceQuotaSpec)
    kind: str = "ResourceQuota"


class LabelRequirement(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """One ``matchExpressions`` entry of a label selector."""

    key: str = ""
    operator: str = ""  # In, NotIn, Exists, DoesNotExist
    values: list[str] = []


class LabelSelector(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelRequirement] = []

    def selects(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy every requirement (an empty selector selects everything, as in policy/v1).
        An operator Kubernetes does not define selects nothing."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(_requirement_holds(r, labels) for r in self.match_expressions)


def _requirement_holds(req: LabelRequirement, labels: dict[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    return False


class PodDisruptionBudgetSpec(msgspec.Struct, omit_defaults=True, gc=False):
    selector: LabelSelector | None = None  # None selects no pod


class PodDisruptionBudgetStatus(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    disruptions_allowed: int = 0


class PodDisruptionBudget(msgspec.Struct, omit_defaults=True, gc=False):
    """A ``policy/v1`` PodDisruptionBudget as preemption reads it (which pods, how many may be disrupted now)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodDisruptionBudgetSpec = msgspec.field(default_factory=PodDisruptionBudgetSpec)
    status: PodDisruptionBudgetStatus = msgspec.field(default_factory=PodDisruptionBudgetStatus)
    kind: str = "PodDisruptionBudget"
