"""``prefilter``: read a pod once — every container's device requests and the pod's scheduling options.

Everything that can be wrong with a pod's own input is found here and raised as ``InvalidInput`` (a request
that cannot be parsed is an error, never "no GPU": spec §11 item 3), so the per-node stages only judge fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hami.devices.base import ContainerRequest, Selector, Vendor
from hami.devices.policy import GpuPolicy, parse_gpu_policy, parse_node_policy
from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.protocol.weights import decode_scoring_weights
from hami.scheduling.usage import Kind, container_kinds

__all__ = ["PodRequest", "SchedulingDefaults", "prefilter"]


@dataclass(frozen=True, slots=True)
class SchedulingDefaults:
    """Cluster-wide defaults a pod may override with annotations."""

    node_policy: str = "binpack"
    gpu_policy: str = "spread"


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod, read once: per container (init first) the requests by vendor, and the pod's options."""

    uid: str
    namespace: str
    name: str
    kinds: tuple[Kind, ...]
    containers: tuple[Mapping[str, ContainerRequest], ...]
    node_policy: str
    gpu_policy: GpuPolicy
    weights: tuple[int, int, int]
    selectors: Mapping[str, Selector]
    signature: tuple[object, ...] = ()
    """Everything a node's verdict depends on besides the node (hashable): pods with equal signatures get
    equal verdicts on a node whose usage did not change, which lets ``decide`` reuse them."""
    names: tuple[str, ...] = ()
    """The container names, in the order of ``containers`` (init first); read by the vendors' extra annotations."""
    priority: int = 0
    """``spec.priority`` (0 when unset): preemption takes only pods of strictly lower priority."""
    preempts: bool = True
    """False for ``spec.preemptionPolicy: Never``: such a pod waits and never has others preempted."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def vendors(self) -> tuple[str, ...]:
        """The vendors this pod asks for, sorted."""
        return tuple(sorted({v for c in self.containers for v in c}))

    @property
    def wants_devices(self) -> bool:
        return any(self.containers)


def prefilter(pod: Pod, vendors: Mapping[str, Vendor], defaults: SchedulingDefaults) -> PodRequest:
    """Parse every container's requests (init containers first) and the pod's scheduling annotations."""
    annotations = pod.metadata.annotations
    containers: list[Mapping[str, ContainerRequest]] = []
    all_containers = [("initContainers", i, c) for i, c in enumerate(pod.spec.init_containers)]
    all_containers += [("containers", i, c) for i, c in enumerate(pod.spec.containers)]
    for section, i, container in all_containers:
        field = f"{section}[{i}]({container.name})"
        reqs: dict[str, ContainerRequest] = {}
        for name, vendor in vendors.items():
            req = vendor.parse_request(container, field)
            if req is not None and req.nums > 0:
                reqs[name] = req
        containers.append(reqs)
    numa_bind = False
    for vendor in vendors.values():  # every vendor reads its annotation: a bad value is refused in any pod
        numa_bind = vendor.numa_bind(annotations) or numa_bind
    gpu_raw = annotations.get(keys.GPU_SCHEDULER_POLICY)
    gpu_policy = (
        parse_gpu_policy(gpu_raw, numa_bind)
        if gpu_raw is not None
        else parse_gpu_policy(defaults.gpu_policy, numa_bind, "settings.gpu_scheduler_policy")
    )
    node_raw = annotations.get(keys.NODE_SCHEDULER_POLICY)
    node_policy = parse_node_policy(node_raw) if node_raw is not None else defaults.node_policy
    used_vendors = {v for c in containers for v in c}
    kinds = container_kinds(pod)
    w = decode_scoring_weights(annotations.get(keys.DEVICE_SCORING_WEIGHTS))
    weights = (w.slot, w.core, w.memory)
    selectors = {v: vendors[v].selector(annotations) for v in sorted(used_vendors)}
    signature = (
        kinds,
        tuple(tuple(sorted(c.items())) for c in containers),
        gpu_policy,
        weights,
        tuple(sorted(selectors.items())),
        node_policy,  # a vendor's node score may depend on it (FitContext.node_policy)
    )
    return PodRequest(
        uid=pod.metadata.uid,
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        kinds=kinds,
        containers=tuple(containers),
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        weights=weights,
        selectors=selectors,
        signature=signature,
        names=tuple(c.name for _, _, c in all_containers),
        priority=pod.spec.priority or 0,
        preempts=pod.spec.preemption_policy != "Never",
    )
