"""The answer to kube-scheduler's preempt verb (kube-scheduler 1.38+), pure: per candidate node it offers, the pods
to preempt so the pod fits there under the vendors' own Fit (``hami.scheduling.preemption``).

kube-scheduler's DefaultPreemption runs only its in-tree filters in its dry run; for the resources hami manages
(``ignoredByScheduler``) they always pass, so from 1.38 it offers such nodes with an empty victim list and lets
the extender name the victims (kubernetes#135486). A node whose list is not empty needs those pods gone for its
in-tree resources (CPU, memory, ports): they are kept, counted as leaving, and hami adds the pods its devices
need on top. A node hami leaves out of the answer is one where preemption cannot help; a node where the pod
fits without preempting anything (pods being preempted leaving) is left out too, since kube-scheduler refuses a
candidate without victims and the pod is placed once they have gone.

kube-scheduler ranks the candidates itself, by the same rules as ``preempt`` (budget violations, highest victim
priority, sum of priorities, count, latest start); the answer lists them best first all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hami.scheduling.preemption import Budget, Candidate, victims_on
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState

__all__ = ["NEVER", "NO_VICTIMS", "VerbAnswer", "answer_preempt_verb"]

NEVER = "preemptionPolicy is Never: the pod preempts no pod"
NO_VICTIMS = "the pod fits there once the pods being preempted there have left: nothing to preempt"


@dataclass(frozen=True, slots=True)
class VerbAnswer:
    """Per node kept, best first: the victims' UIDs (kube-scheduler's own first, then hami's) and how many
    PodDisruptionBudgets their eviction breaks; per node left out, why."""

    victims: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    violations: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)


def answer_preempt_verb(
    state: ClusterState,
    req: PodRequest,
    offered: Mapping[str, Sequence[str]],
    offered_violations: Mapping[str, int],
    budgets: Sequence[Budget] = (),
) -> VerbAnswer:
    """hami's victims on each node of ``offered`` (node → the UIDs kube-scheduler's dry run chose there)."""
    if not req.wants_devices:  # not hami's pod: what kube-scheduler chose stands, unchanged
        return VerbAnswer({n: tuple(v) for n, v in offered.items()}, dict(offered_violations))
    if not req.preempts:
        return VerbAnswer(refused=dict.fromkeys(offered, NEVER))
    found: list[tuple[Candidate, tuple[str, ...]]] = []
    refused: dict[str, str] = {}
    for node in sorted(offered):
        given = tuple(dict.fromkeys(offered[node]))
        outcome = victims_on(state, req, node, _after(budgets, given), gone=given)
        if isinstance(outcome, str):
            refused[node] = outcome
        elif not given and not outcome.victims:
            refused[node] = NO_VICTIMS
        else:
            found.append((outcome, given))
    found.sort(key=lambda pair: pair[0].rank())
    victims = {c.node: given + tuple(r.uid for r in c.victims) for c, given in found}
    violations = {c.node: offered_violations.get(c.node, 0) + c.violations for c, _ in found}
    return VerbAnswer(victims, violations, refused)


def _after(budgets: Sequence[Budget], given: Sequence[str]) -> list[Budget]:
    """The budgets as they stand once kube-scheduler's own victims of a node have gone: each allows that many
    fewer disruptions (their breaches are in kube-scheduler's count already; hami's victims are counted on top)."""
    return [replace(b, allowed=b.allowed - sum(1 for uid in given if uid in b.pods)) for b in budgets]
