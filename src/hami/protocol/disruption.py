"""Why a pod is terminating, as preemption must know it (issue 39): the ``DisruptionTarget`` condition.

kube-scheduler waits only for pods terminating **because of a preemption**: a pod whose ``deletionTimestamp`` is
set and whose first ``DisruptionTarget`` condition is ``True`` with reason ``PreemptionByScheduler``
(``podTerminatingByPreemption`` in its DefaultPreemption). Any other terminating pod — deleted by its owner, with a
grace period of a day or a finalizer, or evicted by someone else (reason ``EvictionByEvictionAPI``) — stays in its
dry run as any pod: its capacity is used, and it is a victim like any other if its priority is lower. hami reads
the same condition the same way (``terminating_by_preemption``).

hami writes kube-scheduler's condition on its own victims, with kube-scheduler's reason and message, followed by
the preemptor it evicted them for (``disruption_text``): ``<scheduler>: preempting to accommodate a higher priority
pod: <namespace>/<name> (UID <uid>)``. Only the API server's status writers (the schedulers, the kubelet of the
pod's node, controllers) can set a condition; a tenant can write its pod's annotations, not its status. So that
message is the record of a hami eviction: ``hami.io/preempted-for`` on a pod is believed only when the condition
names the same preemptor (``preempted_for``), and after a restart a hold is rebuilt only for the pod of that UID.
"""

from __future__ import annotations

import re
from typing import Final

from hami.protocol.objects import Pod, PodCondition

__all__ = [
    "DISRUPTION_TARGET",
    "PREEMPTION_BY_SCHEDULER",
    "disruption_of",
    "disruption_text",
    "preempted_for",
    "terminating_by_preemption",
]

DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
"""kube-scheduler's reason on its victims' ``DisruptionTarget`` condition; hami's victims get the same."""

_HAMI_TEXT: Final = re.compile(r": preempting to accommodate a higher priority pod: (\S+/\S+) \(UID (\S+)\)\Z")


def disruption_text(scheduler: str, preemptor: str, uid: str) -> str:
    """The ``DisruptionTarget`` message hami writes on a victim: kube-scheduler's (its own name first), then the
    preemptor's ``namespace/name`` and UID."""
    return f"{scheduler}: preempting to accommodate a higher priority pod: {preemptor} (UID {uid})"


def disruption_of(pod: Pod) -> PodCondition | None:
    """The pod's first ``DisruptionTarget`` condition (the one kube-scheduler reads), None without one."""
    return next((c for c in pod.status.conditions if c.type == DISRUPTION_TARGET), None)


def terminating_by_preemption(pod: Pod) -> bool:
    """Whether the pod is terminating because a scheduler preempted it (kube-scheduler's rule, module docstring)."""
    if pod.metadata.deletion_timestamp is None:
        return False
    condition = disruption_of(pod)
    return condition is not None and condition.status == "True" and condition.reason == PREEMPTION_BY_SCHEDULER


def preempted_for(pod: Pod, annotation: str) -> tuple[str, str] | None:
    """The preemptor (``namespace/name``, UID) hami evicted the terminating ``pod`` for, when its condition says
    so and names the preemptor its ``annotation`` (``hami.io/preempted-for``) names; None otherwise."""
    if not annotation or not terminating_by_preemption(pod):
        return None
    condition = disruption_of(pod)
    found = _HAMI_TEXT.search(condition.message) if condition is not None else None
    if found is None or found.group(1) != annotation:
        return None
    return found.group(1), found.group(2)
