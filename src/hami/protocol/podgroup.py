"""PodGroup objects as hami reads them: the gang's minimum and whether the group could not be placed.

Two kinds are read (docs/gangs.md), each in whatever version the cluster serves:

* ``scheduling.k8s.io`` ``PodGroup`` (kube-scheduler's gang scheduling, the ``GenericWorkload`` gate; ``v1beta1``
  from 1.37, served with ``--runtime-config=scheduling.k8s.io/v1beta1=true``; ``v1alpha3``/``v1alpha2`` before):
  ``spec.schedulingPolicy.gang.minCount``; pods name it in ``spec.schedulingGroup.podGroupName``. Its status
  conditions say how scheduling went: a scheduling condition with status ``False`` means kube-scheduler gave up
  on the group (for now), and hami releases the members' unbound allocations.
* ``scheduling.x-k8s.io`` ``PodGroup`` (the scheduler-plugins coscheduling CRD; pods carry the label
  ``scheduling.x-k8s.io/pod-group``): ``spec.minMember``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from hami.protocol.objects import ObjectMeta

__all__ = [
    "FAILED_CONDITIONS",
    "GANG_API_GROUP",
    "LABEL_API_GROUP",
    "PREFERRED_VERSIONS",
    "PodGroup",
    "pod_group_state",
]

GANG_API_GROUP: Final = "scheduling.k8s.io"
LABEL_API_GROUP: Final = "scheduling.x-k8s.io"
PREFERRED_VERSIONS: Final = ("v1", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1")
"""The versions hami knows the PodGroup of, newest first: the first one the cluster serves podgroups in is read."""
FAILED_CONDITIONS: Final = frozenset({"PodGroupInitiallyScheduled"})
"""Condition types that, with status ``False``, say kube-scheduler could not place the group (reason
``Unschedulable`` or ``SchedulerError``; once ``True`` it stays so)."""


class PodGroup(msgspec.Struct, omit_defaults=True, gc=False):
    """A PodGroup of either kind; ``spec`` and ``status`` are kept raw (their shape moves between versions)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}
    kind: str = "PodGroup"


def pod_group_state(group: PodGroup) -> tuple[int | None, bool]:
    """``(minimum, failed)``: the gang's minimum (``spec.schedulingPolicy.gang.minCount``, else ``spec.minMember``;
    None when absent or not a whole number ≥ 1) and whether a scheduling condition says it could not be placed."""
    spec = group.spec
    policy = spec.get("schedulingPolicy")
    gang = policy.get("gang") if isinstance(policy, dict) else None
    minimum = gang.get("minCount") if isinstance(gang, dict) else spec.get("minMember")
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
        minimum = None
    conditions = group.status.get("conditions")
    failed = isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") in FAILED_CONDITIONS and c.get("status") == "False" for c in conditions
    )
    return minimum, failed
