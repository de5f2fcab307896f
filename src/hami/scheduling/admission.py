"""Pod admission: the vendor-neutral decision behind ``POST /webhook`` (webhook-bind-plugin-vendors.md §1.2).

``Admission.review(pod, namespace)`` takes the raw pod JSON of an AdmissionReview and returns a ``Verdict``:
allowed (with a targeted JSON patch, maybe empty) or denied (with a message naming the container and the
resource). It raises ``InvalidInput`` only for a pod it cannot read (the webhook answers 400). Pure: the
quota book is read, never written.

Steps, in HAMi's order:

1. no containers → denied ``pod has no containers``;
2. scheduler-name gate: a pod already assigned to another scheduler is allowed unchanged
   (``pod already has different scheduler assigned``); ``default-scheduler`` counts as unassigned while
   ``force_overwrite_default_scheduler`` is on;
3. every vendor's ``Admitter`` sees every container, init containers first, and records defaults, rewrites
   (limits and requests set), environment variables and pod annotations (``hami.devices.admission``); then
   every container's requests are parsed (``prefilter``) so that an invalid
   quantity or annotation is refused now, with the parser's message, instead of leaving the pod pending;
4. a pod asking for no vendor's devices is allowed with only the environment edits (``overwriteEnv``);
5. otherwise ``spec.schedulerName`` becomes ours, and a pod that already names a node is denied (hami must
   choose the node for the devices to be accounted);
6. the namespace's device quota (scheduler-core.md §6.10) must still hold → else denied
   ``exceeding resource quota``.

Deliberate differences from HAMi: a privileged container is left as it is (no defaults, no environment
variables) instead of refusing the whole pod (§11 item 8: a privileged sidecar next to a GPU container made
the pod impossible to create); its device requests still count, so the pod still goes to hami. Quantities
HAMi would silently drop are refused (spec §11 items 3, 12). Sidecar init containers count as running beside
the app containers in the quota demand, as in the ledger (``hami.scheduling.usage``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import msgspec

from hami.devices.admission import Admitter, ContainerEdit, PodContext
from hami.devices.base import Vendor
from hami.errors import InvalidInput
from hami.protocol.objects import Container, Pod
from hami.protocol.podpatch import PatchOp, PodPatch, Section
from hami.scheduling.quota import QuotaBook
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.usage import Kind

__all__ = [
    "DEFAULT_SCHEDULER",
    "Admission",
    "AdmissionSettings",
    "Verdict",
    "admitters_for",
    "quota_demand",
]

DEFAULT_SCHEDULER: Final = "default-scheduler"
OTHER_SCHEDULER: Final = "pod already has different scheduler assigned"
NO_CONTAINERS: Final = "pod has no containers"
NODE_ASSIGNED: Final = "pod has node assigned"
QUOTA_EXCEEDED: Final = "exceeding resource quota"


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """``--scheduler-name`` (empty: never rename) and ``--force-overwrite-default-scheduler``."""

    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer: allowed with ``patch`` (RFC 6902 ops, empty for no change) or denied with ``message``."""

    allowed: bool
    message: str = ""
    patch: tuple[PatchOp, ...] = ()


def admitters_for(vendors: Mapping[str, Vendor]) -> dict[str, Admitter]:
    """Each vendor's admission behaviour (``Vendor.admitter``), keyed like ``vendors``."""
    return {name: vendor.admitter() for name, vendor in vendors.items()}


def _containers(pod: Pod) -> Iterator[tuple[Section, int, Container]]:
    for i, c in enumerate(pod.spec.init_containers):
        yield "initContainers", i, c
    for i, c in enumerate(pod.spec.containers):
        yield "containers", i, c


def _spec(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = raw.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _field(section: Section, index: int, container: Container) -> str:
    return f"{section}[{index}]({container.name})"


def _apply(container: Container, section: Section, index: int, edit: ContainerEdit, patch: PodPatch) -> None:
    """One container's edit: into the typed container (the parser sees it) and into the patch."""
    container.resources.limits.update(edit.limits)
    container.resources.requests.update(edit.requests)
    patch.set_resources(section, index, "limits", edit.limits)
    patch.set_resources(section, index, "requests", edit.requests)
    patch.set_env(section, index, edit.env)


def quota_demand(request: PodRequest, vendors: Mapping[str, Vendor]) -> dict[str, int]:
    """What the pod would add to its namespace's quota, by resource name (MiB already × memory factor).

    Per vendor and dimension: sidecars + max(largest init container, sum of app containers), each container
    counting ``request × devices``. Vendors whose demand is zero in both dimensions are left out (HAMi).
    Percentage-only memory requests are invisible here (their MiB depend on the card).
    """
    demand: dict[str, int] = {}
    for name, vendor in vendors.items():
        names = vendor.resources
        if not names.memory and not names.core:
            continue
        init = [0, 0]
        side = [0, 0]
        app = [0, 0]
        for kind, requests in zip(request.kinds, request.containers, strict=True):
            r = requests.get(name)
            if r is None:
                continue
            mem, cores = r.memreq * r.nums, r.coresreq * r.nums
            if kind is Kind.INIT:
                init = [max(init[0], mem), max(init[1], cores)]
            elif kind is Kind.SIDECAR:
                side = [side[0] + mem, side[1] + cores]
            else:
                app = [app[0] + mem, app[1] + cores]
        mem = side[0] + max(init[0], app[0])
        cores = side[1] + max(init[1], app[1])
        if mem == 0 and cores == 0:
            continue
        if names.memory:
            demand[names.memory] = demand.get(names.memory, 0) + mem
        if names.core:
            demand[names.core] = demand.get(names.core, 0) + cores
    return demand


@dataclass(frozen=True, slots=True)
class Admission:
    """The webhook's decision, configured once per process."""

    vendors: Mapping[str, Vendor]
    admitters: Mapping[str, Admitter]
    defaults: SchedulingDefaults
    settings: AdmissionSettings
    quotas: QuotaBook | None = None
    quota_factors: Mapping[str, int] | None = None

    def _assigned_elsewhere(self, scheduler: str) -> bool:
        """Spec §1.2 step 3: skip iff named, not (an overridable) default-scheduler, and not ours."""
        ours = self.settings.scheduler_name
        if not scheduler:
            return False
        if scheduler == DEFAULT_SCHEDULER and self.settings.force_overwrite_default_scheduler:
            return False
        return not ours or scheduler != ours

    def review(self, raw: Mapping[str, Any], namespace: str = "") -> Verdict:
        """Decide on one pod (the AdmissionReview's ``request.object``); see the module docstring."""
        try:
            pod = msgspec.convert(raw, type=Pod)
        except msgspec.ValidationError as err:
            raise InvalidInput("request.object", "…", f"not a pod: {err}") from None
        if not pod.spec.containers:
            return Verdict(False, NO_CONTAINERS)
        if self._assigned_elsewhere(pod.spec.scheduler_name):
            return Verdict(True, OTHER_SCHEDULER)
        patch = PodPatch(raw)
        try:
            uses = self._admit_containers(pod, raw, patch)
            request = prefilter(pod, self.vendors, self.defaults) if uses else None
        except InvalidInput as err:
            return Verdict(False, str(err))
        if request is None:
            return Verdict(True, patch=tuple(patch.ops))
        problem = self._assign_scheduler(pod, uses, patch)
        if problem is None:
            quota = self._quota_problem(request, namespace or pod.metadata.namespace)
            problem = None if quota is None else f"{QUOTA_EXCEEDED}: {quota}"
        if problem is not None:
            return Verdict(False, problem)
        return Verdict(True, patch=tuple(patch.ops))

    def _admit_containers(self, pod: Pod, raw: Mapping[str, Any], patch: PodPatch) -> dict[str, str]:
        """Run every admitter on every container, recording the edits in ``patch``; returns container field → the
        first vendor resource it asks for (privileged containers included: they are only not edited).

        The pod's annotations as edited so far are what the next admitter sees (``PodContext``); once every
        container is admitted they are set on the pod, so that the request is parsed as it will be scheduled."""
        uses: dict[str, str] = {}
        runtime_class = ""  # the first runtimeClassName a vendor that found its devices wants
        annotations = dict(pod.metadata.annotations)
        edited: dict[str, str] = {}
        context = PodContext(pod.metadata.name, pod.metadata.namespace, MappingProxyType(annotations))
        for section, index, container in _containers(pod):
            field = _field(section, index, container)
            if container.security_context is not None and container.security_context.privileged:
                self._privileged_uses(container, field, uses)
                continue
            edit = ContainerEdit()
            for name, admitter in self.admitters.items():
                found = admitter.admit(container, field, edit, context)
                annotations.update(edit.annotations)
                if found:
                    uses.setdefault(field, self.vendors[name].resources.count)
                    runtime_class = runtime_class or admitter.runtime_class_name
            edited.update(edit.annotations)
            _apply(container, section, index, edit, patch)
        pod.metadata.annotations.update(edited)
        patch.set_annotations(edited)
        if uses and runtime_class and not _spec(raw).get("runtimeClassName"):
            patch.set_spec_field("runtimeClassName", runtime_class)
        return uses

    def _privileged_uses(self, container: Container, field: str, uses: dict[str, str]) -> None:
        for vendor in self.vendors.values():
            wanted = vendor.parse_request(container, field)
            if wanted is not None and wanted.nums > 0:
                uses.setdefault(field, vendor.resources.count)

    def _assign_scheduler(self, pod: Pod, uses: Mapping[str, str], patch: PodPatch) -> str | None:
        """Set ``schedulerName`` to ours (when configured); refuses a pod whose node is already set."""
        scheduler = self.settings.scheduler_name
        if not scheduler:
            return None
        if pod.spec.node_name:
            field, resource = next(iter(uses.items()))
            return (
                f"{NODE_ASSIGNED}: spec.nodeName is {pod.spec.node_name!r} but {field} asks for {resource}; "
                f"remove nodeName so that {scheduler} chooses the node and its devices"
            )
        patch.set_spec_field("schedulerName", scheduler)
        return None

    def _quota_problem(self, request: PodRequest, namespace: str) -> str | None:
        """None when the pod's demand fits its namespace's device quota, else which limit it breaks."""
        if self.quotas is None:
            return None
        demand = quota_demand(request, self.vendors)
        if not demand:
            return None
        return self.quotas.problem(namespace, demand, self.quota_factors or {})
