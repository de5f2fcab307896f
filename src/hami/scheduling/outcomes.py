"""The outcomes of the cycle as data: what a /filter, a /bind and a clean-up retry ended in, and the API calls that
failed. The edge (``hami.server.extender``) only maps them to its answers, events, log lines and metrics."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hami.protocol.objects import Pod
from hami.scheduling.decide import Decision

__all__ = [
    "ApiFailure",
    "BindOutcome",
    "BindRefusal",
    "Bound",
    "Cleanup",
    "Cleared",
    "FilterOutcome",
    "Filtered",
    "Preempting",
    "PreemptionNote",
    "Refused",
]


@dataclass(frozen=True, slots=True)
class ApiFailure:
    """A Kubernetes call of the cycle that failed: the operation (``patch_pod``, ``get_pod``, ``unlock_node``) and,
    where nothing else reports it (no answer, no event), a line for the log."""

    operation: str
    log: str = ""


class Filtered(enum.StrEnum):
    """How a /filter ended (also the ``hami_filter_decisions`` label)."""

    INVALID = "invalid"
    PASSTHROUGH = "passthrough"
    NOT_READY = "not-ready"
    REFUSED = "refused"
    UNSCHEDULABLE = "unschedulable"
    SCHEDULED = "scheduled"
    COMMIT_FAILED = "commit-failed"


class Preempting(enum.StrEnum):
    """How hami's own preemption for an unschedulable pod ended (also the ``hami_preemption_attempts`` label)."""

    PREEMPTED = "preempted"  # victims evicted (or already leaving), the freed capacity held for the pod
    WAITING = "waiting"  # a hold of an earlier attempt stands: its victims are still terminating
    NO_CANDIDATE = "no-candidate"  # no node where evicting lower-priority pods makes the pod fit
    BUDGET_REFUSED = "budget-refused"  # every candidate tried was refused by a PodDisruptionBudget (429)
    FAILED = "failed"  # an eviction failed otherwise (``api_errors``)


@dataclass(frozen=True, slots=True)
class PreemptionNote:
    """What hami's preemption did for the pod of a /filter: the node, the victims (``namespace/name``) and how many
    were evicted now, the hold's deadline (Unix seconds), and the words for a person (the node's failure reason in
    the answer, the ``Preempting`` event)."""

    result: Preempting
    message: str
    node: str = ""
    victims: tuple[str, ...] = ()
    evicted: int = 0
    deadline: float = 0.0


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """One /filter as data: the decision (chosen node, devices, every rejection with its numbers), what went
    wrong (``error``), and the Kubernetes calls that failed."""

    result: Filtered
    pod: Pod
    candidates: tuple[str, ...]
    decision: Decision | None = None
    error: str = ""
    api_errors: tuple[ApiFailure, ...] = ()
    preemption: PreemptionNote | None = None
    gang_released: tuple[str, ...] = ()
    """The other members of the pod's gang whose unbound allocations were dropped because this one fits nowhere
    (``hami.scheduling.gangs``)."""


class Bound(enum.StrEnum):
    """How a /bind ended."""

    REFUSED = "refused"  # names no pod, another pod, or one that may not be bound: nothing locked or written
    COMMIT_FAILED = "commit-failed"  # its /filter's annotation write failed
    POD_MISSING = "pod-missing"
    READ_FAILED = "read-failed"
    ALREADY_BOUND = "already-bound"
    INVALID = "invalid"
    RESERVED_ELSEWHERE = "reserved-elsewhere"
    NO_ALLOCATION = "no-allocation"
    FAILED = "failed"
    BOUND = "bound"


class Refused(enum.StrEnum):
    """Why the pod a /bind names may not be bound (``hami.scheduling.bind.bind_refusal``)."""

    ANOTHER_POD = "another-pod"  # the pod of that name has another UID
    BOUND_THERE = "bound-there"  # already bound to that very node: nothing to do (``Bound.ALREADY_BOUND``)
    BOUND_ELSEWHERE = "bound-elsewhere"
    NOT_PENDING = "not-pending"  # running or finished


@dataclass(frozen=True, slots=True)
class BindRefusal:
    """A refusal as data: why, and the words for a person (part of the /bind answer)."""

    why: Refused
    message: str


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """One /bind as data: how it ended, the pod it concerns, the message, and the API calls that failed."""

    result: Bound
    pod: Pod
    node: str
    message: str = ""
    api_errors: tuple[ApiFailure, ...] = ()


class Cleared(enum.StrEnum):
    """How one retry of an allocation clean-up ended (the first try is part of the bind: see ``BindOutcome``)."""

    RETRYING = "retrying"  # this try failed (``error`` says why); another follows after a pause
    LANDED = "landed"  # the annotations are gone and the reservation with them
    GONE = "gone"  # no pod with that UID any more (deleted, or re-created): nothing to remove
    MOOT = "moot"  # bound meanwhile (the allocation is in use) or nothing left on it: the pod watch keeps the ledger
    CRASHED = "crashed"  # the retries stopped on an unexpected error (``error``)


@dataclass(frozen=True, slots=True)
class Cleanup:
    """One retry of the clean-up of a pod's allocation after a failed bind, as data."""

    result: Cleared
    namespace: str
    name: str
    uid: str
    error: str = ""
